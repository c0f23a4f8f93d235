// Package sweepctl is the master's sweep controller (API.md "Sweep search
// and early stopping"): for every sweep that searches (method tpe) or
// stops early (earlyStop) and still has work, it proposes a tpe sweep's
// next members as earlier ones end, never more than its in-flight share,
// and stops the members its early-stopping rule judges below a rung's cut.
//
// It keeps no state of its own that matters: each step reads the sweep,
// its members' latest runs and their series from the store, replays the
// reports through sweep/earlystop in one order fixed by the data (Judge)
// and asks sweep's pure search for the next proposals, so a restarted
// master carries on where it was, and every master of a deployment, each
// running its controller, reaches the same decisions. Work is not done
// twice: a proposal is added by the store's compare-and-swap on the
// sweep's member count (AddSweepMembers), and a member is stopped only by
// the master that holds its worker (dispatch's StopEarly), so its reason
// and error are written once, by the fenced end of the run.
//
// It never creates runs itself (httpapi builds them from the sweep's
// spec), never writes a run's state (the dispatcher's one cancel path
// does) and never blocks a caller: it runs on its own goroutine.
package sweepctl
