package samtemplate_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pml-sandbox/pml/internal/samtemplate"
)

// TestRealTemplate checks the repository's template.yaml: it must pass.
func TestRealTemplate(t *testing.T) {
	for _, p := range samtemplate.Check("../../template.yaml") {
		t.Error(p)
	}
}

// good is a small valid template; each broken case edits it.
const good = `AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Parameters:
  Memory:
    Type: Number
    Default: 512
Conditions:
  Big: !Equals [!Ref Memory, 1024]
Resources:
  HelloFunction:
    Type: AWS::Serverless::Function
    Metadata:
      BuildMethod: makefile
    Properties:
      CodeUri: .
      Handler: bootstrap
      Runtime: provided.al2023
      MemorySize: !If [Big, 1024, 512]
      Environment:
        Variables:
          TABLE: !Ref Table
          ARN: !GetAtt Table.Arn
          NAME: !Sub "${AWS::StackName}-${Table}"
  Table:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions:
        - AttributeName: pk
          AttributeType: S
      KeySchema:
        - AttributeName: pk
          KeyType: HASH
Outputs:
  Role:
    Value: !GetAtt HelloFunctionRole.Arn
`

// repo lays out a template with the files its functions need.
func repo(t *testing.T, template string, withMake, withMain bool) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name, body string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("template.yaml", template)
	if withMake {
		write("Makefile", "build-HelloFunction:\n\tgo build\n")
	}
	if withMain {
		write("functions/hello/main.go", "package main\n\nfunc main() {}\n")
	}
	return filepath.Join(dir, "template.yaml")
}

func TestBrokenTemplates(t *testing.T) {
	tests := []struct {
		name     string
		edit     func(string) string
		withMake bool
		withMain bool
		want     string // in some problem; "" means no problem
	}{
		{"good", func(s string) string { return s }, true, true, ""},
		{"broken Ref", func(s string) string { return strings.Replace(s, "!Ref Table", "!Ref Tabel", 1) }, true, true, "Ref to Tabel"},
		{"broken GetAtt", func(s string) string { return strings.Replace(s, "!GetAtt Table.Arn", "!GetAtt Nope.Arn", 1) }, true, true, `GetAtt on "Nope"`},
		{"broken Sub", func(s string) string { return strings.Replace(s, "${Table}", "${Missing}", 1) }, true, true, "${Missing}"},
		{"unknown condition", func(s string) string { return strings.Replace(s, "!If [Big,", "!If [Huge,", 1) }, true, true, `unknown condition "Huge"`},
		{"wrong handler", func(s string) string { return strings.Replace(s, "Handler: bootstrap", "Handler: main", 1) }, true, true, "handler is \"main\""},
		{"missing make target", func(s string) string { return s }, false, true, "no target build-HelloFunction"},
		{"missing function package", func(s string) string { return s }, true, false, "no Go main package"},
		{"missing code directory", func(s string) string { return strings.Replace(s, "CodeUri: .", "CodeUri: nowhere", 1) }, true, true, `code directory "nowhere"`},
		{"schema violation", func(s string) string {
			return strings.Replace(s, "BillingMode: PAY_PER_REQUEST", "BillingMode: PAY_PER_REQUEST\n      Colour: blue", 1)
		}, true, true, "Colour"},
		{"not YAML", func(string) string { return "Resources: [unclosed" }, true, true, "YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			problems := samtemplate.Check(repo(t, tt.edit(good), tt.withMake, tt.withMain))
			if tt.want == "" {
				for _, p := range problems {
					t.Error(p)
				}
				return
			}
			for _, p := range problems {
				if strings.Contains(p.String(), tt.want) {
					return
				}
			}
			t.Fatalf("no problem mentions %q; got %v", tt.want, problems)
		})
	}
}
