package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestFunctionsLinkNoStartCostForNothing: every package a linked library
// has is initialised at each cold start, used or not, so the Lambda
// functions (built as the Makefile builds them) must not link what they
// never use: Prometheus's client (they publish EMF; nothing scrapes a
// function), the X-Ray SDK and the AWS SDK v1 it drags in (the functions
// write X-Ray segments themselves, internal/xraysink), nor net/rpc (the
// go1.x runtime's protocol; lambda.norpc).
func TestFunctionsLinkNoStartCostForNothing(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", "lambda.norpc",
		"github.com/pml-sandbox/pml/functions/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	banned := []string{
		"github.com/prometheus/",
		"github.com/aws/aws-xray-sdk-go",
		"github.com/aws/aws-sdk-go/",
		"net/rpc",
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 100 {
		t.Fatalf("go list named %d packages; want the functions' whole link set", len(pkgs))
	}
	for _, p := range pkgs {
		for _, b := range banned {
			if p == b || strings.HasPrefix(p, b) {
				t.Errorf("a function links %s", p)
			}
		}
	}
}
