// Fault injection for the tests that prove crash safety: named points in the code where the
// process can be made to fail on purpose, chosen by the environment, so that a test can kill a
// rank at an exact moment (between two steps, halfway through writing a checkpoint) instead of
// racing a timer. Unset, a fault point is a single branch on a cached flag.
//
//   FT_FAULT=POINT[:N][@RANK]     act the N-th time (default 1st) POINT is reached, on RANK only
//                                 (default every rank; RANK as in the RANK variable)
//   FT_FAULT_ACTION=kill          SIGKILL this process (the default)
//                  =sigterm       SIGTERM this process (a preemption signal to one rank)
//                  =sigterm-parent  SIGTERM the parent (ft_launch, which passes it to every rank)
//                  =sigstop       SIGSTOP this process (a rank that hangs)
//                  =nan           no signal: fault_value() returns true (a poisoned value)
// Points: "step.done" (after each optimizer step and its checkpoint, if any), "checkpoint.*"
// (lib/checkpoint/checkpoint_writer.cpp names each stage of a save), "loss.nan" (each
// micro-batch's loss, before backward: a value fault).
#pragma once

namespace ft {

void fault_point(const char* name);
// A value fault: true at the matching hit when FT_FAULT_ACTION=nan, else false.
bool fault_value(const char* name);

}  // namespace ft
