package dynamolocal

import "syscall"

// procAttr has the kernel kill the JVM when the test binary dies without
// running its cleanup (a panic, go test's -timeout): no orphan keeps a
// port and a gigabyte of memory. The signal is tied to the starting OS
// thread, which the Go runtime only retires when a goroutine locked to it
// exits; at worst the JVM then dies early and the test fails loudly.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
