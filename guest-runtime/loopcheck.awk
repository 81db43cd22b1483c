# loopcheck.awk: adds a check-in with the host to every loop of the guest.
#
# Input and output are WebAssembly text as wabt's wasm2wat prints it: one
# instruction per line, `loop` opening a line of its own. Each loop body
# starts with
#
#     budget -= 1; if (budget == 0) budget = pml.poll()
#
# where budget is a new mutable global and pml.poll is the host import that
# traps once the run must stop. A loop iteration is a few nanoseconds at
# the least, so with the budget the host hands out a check-in comes well
# within a millisecond of CPU, and costs a few instructions per iteration
# otherwise. The global starts at 1: a fresh instance checks in on its
# first iteration. The script fails when there is no pml.poll import or no
# loop, so a change in the guest or in wabt cannot silently turn the checks
# off.
BEGIN { poll = ""; loops = 0 }

/^  \(import "pml" "poll" \(func \(;[0-9]+;\)/ {
  match($0, /\(;[0-9]+;\)/)
  poll = substr($0, RSTART + 2, RLENGTH - 4)
}

# Every line is held back by one before printing, so the module's closing
# parenthesis (the last character of the last line) can be replaced by the
# new definitions at the end.
NR > 1 { print held }
{ held = $0 }

/^ *loop( |$)/ {
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
  loops++
}

END {
  if (poll == "") { print "loopcheck: no pml.poll import" > "/dev/stderr"; exit 1 }
  if (loops == 0) { print "loopcheck: no loops found" > "/dev/stderr"; exit 1 }
  if (held !~ /\)$/) { print "loopcheck: unexpected end of module" > "/dev/stderr"; exit 1 }
  print substr(held, 1, length(held) - 1)
  print "  (global $pml_budget (mut i32) (i32.const 1))"
  print "  (func $pml_poll"
  print "    call " poll
  print "    global.set $pml_budget))"
  printf "loopcheck: %d loops instrumented\n", loops > "/dev/stderr"
}
