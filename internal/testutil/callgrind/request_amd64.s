#include "textflag.h"

// func request(args *[6]uintptr) uintptr
//
// Valgrind's client request on amd64 (valgrind.h,
// VALGRIND_DO_CLIENT_REQUEST_EXPR): RAX holds the address of the request
// and its arguments, RDX the default result; the four rotations of RDI
// (by 128 bits in all: RDI is unchanged) followed by xchg %rbx,%rbx are
// the sequence valgrind recognises. The result comes back in RDX.
TEXT ·request(SB),NOSPLIT,$0-16
	MOVQ args+0(FP), AX
	XORQ DX, DX
	ROLQ $3, DI
	ROLQ $13, DI
	ROLQ $61, DI
	ROLQ $51, DI
	XCHGQ BX, BX
	MOVQ DX, ret+8(FP)
	RET
