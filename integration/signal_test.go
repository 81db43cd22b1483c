package integration

import "syscall"

const syscallTERM = syscall.SIGTERM
