package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/pml-sandbox/pml/internal/atomicfile"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "doc.json")
	for _, content := range []string{`{"v":1}`, `{"v":2, "longer": true}`, ``} {
		if err := atomicfile.Write(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read %q (%v), want %q", got, err, content)
		}
		st, _ := os.Stat(path)
		if st.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v, want 0600", st.Mode().Perm())
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("the directory holds %d entries, want only the file (no temporary left)", len(entries))
	}
	if err := atomicfile.Write(filepath.Join(dir, "missing", "x"), []byte("x")); err == nil {
		t.Fatal("writing into a missing directory succeeded")
	}
}

func TestIsTemp(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{".doc.json.tmp-123", true},
		{".tmp-123", true},
		{"doc.json", false},
		{".lock", false},
		{"x.tmp-1", false},
	}
	for _, tt := range tests {
		if got := atomicfile.IsTemp(tt.name); got != tt.want {
			t.Errorf("IsTemp(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestFailedWriteLeavesNoTemporary: a write that fails at its rename
// removes its temporary file itself.
func TestFailedWriteLeavesNoTemporary(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "doc.json")
	if err := os.Mkdir(path, 0o700); err != nil { // a directory in the way: the rename fails
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Write(path, []byte("x")); err == nil {
		t.Fatal("replacing a non-empty directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if atomicfile.IsTemp(e.Name()) {
			t.Fatalf("a failed write left %s behind", e.Name())
		}
	}
}
