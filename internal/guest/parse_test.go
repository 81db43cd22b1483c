package guest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pml-sandbox/pml/internal/fault"
	"github.com/pml-sandbox/pml/internal/guest"
)

// TestParse: Parse gives QuickJS's verdict on a script body, and runs none
// of it.
func TestParse(t *testing.T) {
	ok := []struct{ name, code string }{
		{"empty", ""},
		{"a return", "return 1"},
		{"top-level await", "const r = await mcp.demo.echo({}); return r"},
		{"keyword accessors", "return { set await(v) {}, get await() {}, set const(v) {}, get const() {}, get class() {}, set class(v) {} }"},
		{"sloppy for-in initializer", "var o = {}; for (var k = 2 in o) {} return k"},
		{"let as an identifier", "var let = [1]; return let[0]"},
		{"an HTML-like comment", "<!-- a comment\nreturn 1"},
		{"a loop forever (never run)", "for (;;) {}"},
		{"a throw (never run)", "throw new Error('ran')"},
		{"a trailing line comment", "return 1 // no newline after it"},
	}
	for _, c := range ok {
		t.Run(c.name, func(t *testing.T) {
			if err := engine.Parse(context.Background(), c.code, guest.Limits{Timeout: 5 * time.Second}); err != nil {
				t.Fatalf("Parse(%q) = %v, want nil", c.code, err)
			}
		})
	}
	refused := []struct{ name, code, want string }{
		{"an unclosed paren", "return (", "SyntaxError"},
		{"a redeclaration", "let a = 1; let a = 2", "SyntaxError"},
		{"a stray brace", "}", "SyntaxError"},
		{"code that leaves the wrapper", "}); globalThis.escaped = 1; (function () {", "closes the function body"},
		{"leaving it at the very end", "})(); (function () {", "closes the function body"},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			err := engine.Parse(context.Background(), c.code, guest.Limits{Timeout: 5 * time.Second})
			if err == nil || err.Code != fault.ScriptError || !strings.Contains(err.Message, c.want) {
				t.Fatalf("Parse(%q) = %v, want a ScriptError with %q", c.code, err, c.want)
			}
		})
	}
	t.Run("nesting past the stack", func(t *testing.T) {
		code := "return " + strings.Repeat("[", 200000) + strings.Repeat("]", 200000)
		err := engine.Parse(context.Background(), code, guest.Limits{Timeout: 5 * time.Second, CodeBytes: 1 << 20})
		// QuickJS's parser reports its own stack's bound as a SyntaxError,
		// in Run as here.
		if err == nil || err.Code != fault.ScriptError || err.Message != "SyntaxError: stack overflow" {
			t.Fatalf("Parse of 200,000 brackets = %v, want SyntaxError: stack overflow", err)
		}
	})
}

// TestParseAgreesWithRun: for code that fails before its first statement,
// Parse reports what Run does, and code Parse admits runs past parsing.
func TestParseAgreesWithRun(t *testing.T) {
	for _, code := range []string{
		"return (", "let a; let a", "return 1 +", "class A { #x; #x }", "return /(/", "return `${`",
		"return 1", "return [1, 2, 3].map(x => x * 2)", "label: for (;;) break label; return 2",
	} {
		perr := engine.Parse(context.Background(), code, guest.Limits{Timeout: 5 * time.Second})
		r := run(t, code)
		rerr := r.Err
		if perr == nil {
			if rerr != nil && strings.HasPrefix(rerr.Message, "SyntaxError") {
				t.Errorf("%q: Parse admits it; Run says %v", code, rerr)
			}
			continue
		}
		if rerr == nil || rerr.Message != perr.Message {
			t.Errorf("%q: Parse says %v; Run says %v", code, perr, rerr)
		}
	}
}
