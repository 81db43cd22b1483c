// Package enginetest gives test packages the one guest engine they share
// and the end-of-run checks every such package wants: the engine closed and
// no goroutine left behind.
package enginetest

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/pml-sandbox/pml/internal/guest"
)

// Main creates the engine, hands it to set, runs the tests, runs each of
// after (e.g. stopping DynamoDB Local), closes the engine and checks for
// leaked goroutines. It exits the process; call it from TestMain.
func Main(m *testing.M, set func(*guest.Engine), after ...func()) {
	ctx := context.Background()
	eng, err := guest.New(ctx, guest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "guest engine:", err)
		os.Exit(1)
	}
	set(eng)
	code := m.Run()
	for _, f := range after {
		f()
	}
	if err := eng.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// ApprovalScript sets a variable, reads with demo.kv_get, then calls the
// destructive demo.kv_delete (call 2): with approval "suspend" it suspends
// there and, resumed, shows that the variable and the read survived, or
// catches the rejection.
const ApprovalScript = `let kept = "set before suspending"
const r = await mcp.demo.kv_get({key: "k"})
try {
  const d = await mcp.demo.kv_delete({key: "k"})
  return {kept, found: r.found, deleted: d}
} catch (e) {
  return {kept, code: e.code, message: e.message}
}`
