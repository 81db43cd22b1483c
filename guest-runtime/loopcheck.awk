# loopcheck.awk: adds a check-in with the host to the guest's loops.
#
#   awk -f loopcheck.awk guest.wat guest.wat > checked.wat
#
# Input and output are WebAssembly text as wabt's wasm2wat prints it: one
# instruction per line, blocks opened by `block`, `loop` and `if` and closed
# by `end`, function names kept (wasm-opt -g). The file is read twice.
#
# Each loop body starts with
#
#     budget -= 1; if (budget == 0) budget = pml.poll()
#
# where budget is a new mutable global and pml.poll is the host import that
# traps once the run must stop. The cheapest iteration is a few
# nanoseconds, so with the budget the host hands out a check-in comes well
# within a millisecond of CPU, and costs a few instructions otherwise. The
# global starts at 1: a fresh instance checks in on its first iteration.
#
# The interpreter's dispatch is left alone: in JS_CallInternal, the loop
# around the switch over opcodes (the widest br_table) and the loops that
# enclose it (the compiler's shape for `goto restart` after an exception
# and for resuming generators). They go round once per bytecode
# instruction, and a check-in there made CPU-bound JS 60% slower (fib(25)
# 16 -> 26 ms). The interpreter already polls in that loop, through
# QuickJS's interrupt handler, on every backward jump and every call, which
# every JS loop and recursion takes. Loops nested in the dispatch (built-ins
# inlined into the interpreter) are checked like all others.
#
# The script fails when there is no pml.poll import, no loop, or no dispatch
# loop to recognise, so a change in the guest or in wabt cannot silently
# turn the checks off or move the exemption.

# The first pass finds the dispatch: the loops around the widest br_table
# in JS_CallInternal.
FNR == NR {
  if ($0 ~ /^  \(func /) { infn = ($2 == "$JS_CallInternal"); depth = 0 }
  if ($0 ~ /^ *(block|loop|if)( |$)/) {
    depth++
    isloop[depth] = ($1 == "loop")
    if (isloop[depth]) { loopno++; num[depth] = loopno }
  } else if ($0 ~ /^ *end( |$)/) {
    depth--
  } else if (infn && $1 == "br_table") {
    n = 0
    for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) n++
    if (n > widest) {
      widest = n
      split("", exempt)
      exempted = 0
      for (d = depth; d > 0; d--) if (isloop[d]) { exempt[num[d]] = 1; exempted++ }
    }
  }
  next
}

FNR == 1 {
  if (widest < 128 || exempted == 0) {
    print "loopcheck: no interpreter dispatch loop found in JS_CallInternal" > "/dev/stderr"
    exit 1
  }
  loopno = 0
}

/^  \(global \$__stack_pointer / { stackpointer = 1 }

/^  \(import "pml" "poll" \(func / {
  poll = $5
  sub(/^\(;/, "", poll); sub(/;\)$/, "", poll)
}

# Every line is held back by one before printing, so the module's closing
# parenthesis (the last character of the last line) can be replaced by the
# new definitions at the end.
FNR > 1 { print held }
{ held = $0 }

/^ *loop( |$)/ {
  loopno++
  if (loopno in exempt) next
  match($0, /^ */)
  pad = substr($0, 1, RLENGTH) "  "
  held = held "\n" pad "global.get $pml_budget" \
    "\n" pad "i32.const 1" \
    "\n" pad "i32.sub" \
    "\n" pad "global.set $pml_budget" \
    "\n" pad "global.get $pml_budget" \
    "\n" pad "i32.eqz" \
    "\n" pad "if" \
    "\n" pad "  call $pml_poll" \
    "\n" pad "end"
  checked++
}

END {
  if (widest < 128 || exempted == 0) exit 1
  if (poll == "") { print "loopcheck: no pml.poll import" > "/dev/stderr"; exit 1 }
  if (checked == 0) { print "loopcheck: no loops found" > "/dev/stderr"; exit 1 }
  if (!stackpointer) { print "loopcheck: no $__stack_pointer global" > "/dev/stderr"; exit 1 }
  if (held !~ /\)$/) { print "loopcheck: unexpected end of module" > "/dev/stderr"; exit 1 }
  print substr(held, 1, length(held) - 1)
  print "  (global $pml_budget (mut i32) (i32.const 1))"
  # Exported for the engine, which checks and resets them before it reuses
  # an instance (internal/guest/snapshot.go).
  print "  (export \"pml_budget\" (global $pml_budget))"
  print "  (export \"pml_stack_pointer\" (global $__stack_pointer))"
  print "  (func $pml_poll"
  print "    call " poll
  print "    global.set $pml_budget))"
  printf "loopcheck: %d loops checked; %d around the interpreter's dispatch (br_table of %d) left to its own polling\n", checked, exempted, widest > "/dev/stderr"
}
