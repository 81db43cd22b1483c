//go:build !linux

package dynamolocal

import "syscall"

// procAttr is empty where there is no parent-death signal; Run and the
// tests' cleanups stop the JVM.
func procAttr() *syscall.SysProcAttr { return nil }
