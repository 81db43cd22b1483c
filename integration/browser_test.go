package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A real browser: Debian's headless Chromium, driven over the DevTools
// protocol (chromedp). .ci/run installs it; a machine without it fails
// the tests that need it rather than skipping them.

// chromiumPath finds Chromium, or fails the test saying how to install it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("headless Chromium is not installed: `apt-get install chromium` (.ci/run installs it); the approval page's browser tests need it")
	return ""
}

// browserTimeout bounds each browser step on a loaded 2-core machine.
const browserTimeout = 60 * time.Second

// newBrowser starts a fresh headless Chromium (its own profile: no
// cookies) and returns a context for chromedp actions in its first tab.
// When the test fails, the tab's last page is saved as a screenshot under
// the system's temporary directory, and its path logged.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	// chromedp's defaults (Puppeteer's: headless, no background
	// throttling of other tabs...), and the machine's own for Chromium.
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox, // as root, which CI is
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 1600),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	// Start the browser now, so a failure to start is reported here. The
	// first Run's context owns the browser: no timeout of its own, which
	// would close it when it expired.
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		cancelAlloc()
		t.Fatalf("starting Chromium: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			screenshot(t, ctx)
		}
		cancel()
		cancelAlloc()
	})
	return ctx
}

// screenshot saves the tab's page as a PNG and logs where.
func screenshot(t *testing.T, ctx context.Context) {
	dir := filepath.Join(os.TempDir(), "pml-browser-failures")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("no screenshot: %v", err)
		return
	}
	name := regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(t.Name(), "_") + "-" + time.Now().Format("20060102-150405") + ".png"
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	where, _ := chromedp.Run(sctx, chromedp.Location())
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Logf("no screenshot: %v", err)
		return
	}
	path := filepath.Join(dir, strings.TrimSuffix(name, ".png")+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Logf("no screenshot: %v", err)
		return
	}
	t.Logf("screenshot of %s at failure: %s", where, path)
}

// browse runs chromedp actions within browserTimeout, failing the test
// with what step did not succeed.
func browse(t *testing.T, ctx context.Context, step string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	bctx, cancel := context.WithTimeout(ctx, browserTimeout)
	defer cancel()
	if err := chromedp.Do(bctx, actions...); err != nil {
		t.Fatalf("%s: %v", step, err)
	}
}

// read runs one chromedp action that answers a value, within
// browserTimeout.
func read[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	bctx, cancel := context.WithTimeout(ctx, browserTimeout)
	defer cancel()
	v, err := chromedp.Run(bctx, a)
	if err != nil {
		t.Fatalf("reading %s: %v", what, err)
	}
	return v
}

// textOf is the rendered text of the element sel selects.
func textOf(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return read(t, ctx, sel, chromedp.Text(chromedp.CSS(sel)))
}

// visible waits until sel is visible.
func visible(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(sel))
}

// click clicks sel.
func click(sel string) chromedp.Action[chromedp.Void] { return chromedp.Click(chromedp.CSS(sel)) }

// signedOutPage waits for the page that says the person signed out: the
// page before it may hold a #message too, and a navigation started while
// the sign-out's own is in flight is aborted.
func signedOutPage() chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.Search(`//h1[normalize-space()="Signed out"]`))
}
