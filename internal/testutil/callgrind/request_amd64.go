package callgrind

// request is implemented in request_amd64.s.
//
//go:noescape
func request(args *[6]uintptr) uintptr
