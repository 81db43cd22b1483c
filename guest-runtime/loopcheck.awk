# loopcheck.awk: adds a check-in with the host to the guest's loops.
#
#   awk -f loopcheck.awk guest.wat guest.wat > checked.wat
#
# Input and output are WebAssembly text as wabt's wasm2wat prints it: one
# instruction per line, blocks opened by `block`, `loop` and `if` and closed
# by `end`, function names kept (wasm-opt -g). The file is read twice.
#
# Every branch back to a loop's label (the only way a loop goes round
# again) is preceded by
#
#     budget -= 1; if (budget == 0) budget = pml.poll()
#
# (a conditional branch: only when it is taken), where budget is a new
# mutable global and pml.poll is the host import that traps once the run
# must stop. The cheapest iteration is a few nanoseconds, so with the
# budget the host hands out a check-in comes well within a millisecond of
# CPU, and costs a few instructions otherwise. The global starts at 1: a
# fresh instance checks in when a loop first goes round again. Counting at
# the back edges rather than at each loop's header leaves the loops that
# run their body once free (most of those a function call passes: a hash
# chain's first hit, a frame's one local), and counts every repetition;
# on fib(25) the check-ins cost ~8% of the instructions at the headers and
# none measurable at the back edges (docs/BENCHMARKS.md).
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
# Bulk memory instructions are checked too. With bulk memory on, clang
# compiles every memset, memcpy and memmove to one memory.fill or
# memory.copy, a single instruction however many bytes it moves: a loop of
# TypedArray.prototype.fill over 60 MB (or copyWithin, set, slice, a large
# ArrayBuffer, Array.prototype.shift on a long array) spent seconds between
# check-ins. So each of them becomes a call to $pml_fill or $pml_copy,
# which charge the same budget one unit per 256 bytes (at memory speed
# about what the slowest loop iterations cost) and move more than 64 KiB
# in 64 KiB chunks with the charge between chunks: however large the
# operation, the guest checks in every few megabytes. Up to 64 KiB the
# instruction runs whole after one compare and one subtraction.
#
# The script fails when there is no pml.poll import, no loop, or no dispatch
# loop to recognise, or a bulk memory instruction in a form it does not
# know, so a change in the guest or in wabt cannot silently turn the checks
# off or move the exemption.

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

# memory.fill and memory.copy (with their three operands on the stack)
# become calls to the chunking helpers defined at the end. They are only
# ever printed bare, for the one memory; any other form stops the build.
/^ *memory\.(fill|copy)( |$)/ {
  if ($0 !~ /^ *memory\.(fill|copy)$/) { print "loopcheck: unexpected bulk memory instruction: " $0 > "/dev/stderr"; bad = 1; exit 1 }
  op = $1
  sub(/^memory\./, "", op)
  sub(/memory\.(fill|copy)$/, "call $pml_" op, held)
  bulk[op]++
  next
}

# The second pass keeps its own nesting: for each open label, whether it
# is a loop whose back edges are checked.
/^  \(func / { depth = 0 }
/^ *(block|if)( |$)/ { checkedAt[++depth] = 0; next }
/^ *loop( |$)/ {
  loopno++
  checkedAt[++depth] = !(loopno in exempt)
  if (checkedAt[depth]) checked++
  next
}
/^ *end( |$)/ { depth--; next }

# A branch back to a checked loop's label is where an iteration starts
# again: the countdown goes there, not at the loop's header, so a loop that
# runs its body once (a hash chain's first hit, a frame's one local: most of
# the loops a function call passes) costs nothing, and every repetition
# still counts. A conditional branch becomes an `if` around the countdown
# and an unconditional branch one label further out, so the countdown runs
# only when the branch is taken.
/^ *(br|br_if|br_table) / {
  loops = 0
  for (i = 2; i <= NF; i++) {
    if ($i ~ /^\(;@[0-9]+;\)$/) {
      m = $i
      gsub(/[^0-9]/, "", m)
      if (checkedAt[m]) loops++
    }
  }
  if (!loops) next
  if ($0 !~ /^ *(br|br_if) [0-9]+ \(;@[0-9]+;\)$/ && $1 != "br_table") {
    print "loopcheck: unexpected branch form: " $0 > "/dev/stderr"; bad = 1; exit 1
  }
  match($0, /^ */)
  pad = substr($0, 1, RLENGTH)
  if ($1 == "br_if") {
    held = pad "if" countdown(pad "  ") "\n" pad "  br " ($2 + 1) "\n" pad "end"
  } else {
    held = substr(countdown(pad), 2) "\n" held
  }
  backedges++
}

function countdown(pad) {
  return "\n" pad "global.get $pml_budget" \
    "\n" pad "i32.const 1" \
    "\n" pad "i32.sub" \
    "\n" pad "global.set $pml_budget" \
    "\n" pad "global.get $pml_budget" \
    "\n" pad "i32.eqz" \
    "\n" pad "if" \
    "\n" pad "  call $pml_poll" \
    "\n" pad "end"
}

END {
  if (bad || widest < 128 || exempted == 0) exit 1
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
  print "    global.set $pml_budget)"
  # $pml_charge takes k units off the budget, or checks in when that would
  # empty it: the budget never reaches zero here, so the loops' countdown
  # (which checks in exactly at zero) keeps working.
  print "  (func $pml_charge (param $k i32)"
  print "    global.get $pml_budget"
  print "    local.get $k"
  print "    i32.le_s"
  print "    if"
  print "      call $pml_poll"
  print "    else"
  print "      global.get $pml_budget"
  print "      local.get $k"
  print "      i32.sub"
  print "      global.set $pml_budget"
  print "    end)"
  # $pml_fill is memory.fill in 64 KiB chunks, charged as it goes. A fill
  # out of bounds traps before it writes, like the instruction.
  print "  (func $pml_fill (param $d i32) (param $v i32) (param $n i32)"
  print "    local.get $n"
  print "    i32.const 65536"
  print "    i32.gt_u"
  print "    if"
  print "      local.get $d"
  print "      local.get $n"
  print "      call $pml_bounds"
  print "      loop"
  print "        i32.const 256"
  print "        call $pml_charge"
  print "        local.get $d"
  print "        local.get $v"
  print "        i32.const 65536"
  print "        memory.fill"
  print "        local.get $d"
  print "        i32.const 65536"
  print "        i32.add"
  print "        local.set $d"
  print "        local.get $n"
  print "        i32.const 65536"
  print "        i32.sub"
  print "        local.tee $n"
  print "        i32.const 65536"
  print "        i32.gt_u"
  print "        br_if 0"
  print "      end"
  print "    end"
  print "    local.get $n"
  print "    i32.const 8"
  print "    i32.shr_u"
  print "    call $pml_charge"
  print "    local.get $d"
  print "    local.get $v"
  print "    local.get $n"
  print "    memory.fill)"
  # $pml_copy is memory.copy (memmove) in 64 KiB chunks: front to back when
  # the destination is below the source, back to front otherwise, so an
  # overlapping copy never reads bytes it has already overwritten.
  print "  (func $pml_copy (param $d i32) (param $s i32) (param $n i32)"
  print "    local.get $n"
  print "    i32.const 65536"
  print "    i32.gt_u"
  print "    if"
  print "      local.get $d"
  print "      local.get $n"
  print "      call $pml_bounds"
  print "      local.get $s"
  print "      local.get $n"
  print "      call $pml_bounds"
  print "      local.get $d"
  print "      local.get $s"
  print "      i32.le_u"
  print "      if"
  print "        loop"
  print "          i32.const 256"
  print "          call $pml_charge"
  print "          local.get $d"
  print "          local.get $s"
  print "          i32.const 65536"
  print "          memory.copy"
  print "          local.get $d"
  print "          i32.const 65536"
  print "          i32.add"
  print "          local.set $d"
  print "          local.get $s"
  print "          i32.const 65536"
  print "          i32.add"
  print "          local.set $s"
  print "          local.get $n"
  print "          i32.const 65536"
  print "          i32.sub"
  print "          local.tee $n"
  print "          i32.const 65536"
  print "          i32.gt_u"
  print "          br_if 0"
  print "        end"
  print "      else"
  print "        loop"
  print "          i32.const 256"
  print "          call $pml_charge"
  print "          local.get $n"
  print "          i32.const 65536"
  print "          i32.sub"
  print "          local.set $n"
  print "          local.get $d"
  print "          local.get $n"
  print "          i32.add"
  print "          local.get $s"
  print "          local.get $n"
  print "          i32.add"
  print "          i32.const 65536"
  print "          memory.copy"
  print "          local.get $n"
  print "          i32.const 65536"
  print "          i32.gt_u"
  print "          br_if 0"
  print "        end"
  print "      end"
  print "    end"
  print "    local.get $n"
  print "    i32.const 8"
  print "    i32.shr_u"
  print "    call $pml_charge"
  print "    local.get $d"
  print "    local.get $s"
  print "    local.get $n"
  print "    memory.copy)"
  # $pml_bounds traps, as the instruction would have before writing a
  # byte, when [p, p+n) is not all inside memory.
  print "  (func $pml_bounds (param $p i32) (param $n i32)"
  print "    local.get $p"
  print "    i64.extend_i32_u"
  print "    local.get $n"
  print "    i64.extend_i32_u"
  print "    i64.add"
  print "    memory.size"
  print "    i64.extend_i32_u"
  print "    i64.const 16"
  print "    i64.shl"
  print "    i64.gt_u"
  print "    if"
  print "      unreachable"
  print "    end))"
  printf "loopcheck: %d loops checked at %d back edges; %d around the interpreter's dispatch (br_table of %d) left to its own polling; %d memory.fill and %d memory.copy chunked\n", checked, backedges, exempted, widest, bulk["fill"], bulk["copy"] > "/dev/stderr"
}
