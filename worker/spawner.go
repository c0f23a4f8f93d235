package worker

import (
	"os/exec"
	"runtime"

	"github.com/rlsched/rlsched/worker/cgroup"
)

// spawner starts every run from one OS thread that lives as long as the
// worker. Pdeathsig fires when the thread that forked a child exits, not the
// process; Go ends a thread when a goroutine locked to it exits, so a run
// forked from an arbitrary thread could be SIGKILLed at random.
//
// start is safe from any goroutine; stop must be called once, after every
// process it started has been reaped.
type spawner struct {
	reqs chan spawnReq
	done chan struct{}
}

type spawnReq struct {
	cmd   *exec.Cmd
	group *cgroup.Group // nil: none
	errc  chan error
}

func startSpawner() *spawner {
	s := &spawner{reqs: make(chan spawnReq), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		runtime.LockOSThread() // never unlocked: the thread ends with the worker
		for req := range s.reqs {
			req.errc <- req.group.Start(req.cmd)
		}
	}()
	return s
}

// start starts cmd on the spawner's thread, inside g (nil: none). On cgroup
// v1 the thread itself enters g for the fork (cgroup.Group.Start), which
// is safe only here: nothing else forks from this thread.
func (s *spawner) start(cmd *exec.Cmd, g *cgroup.Group) error {
	errc := make(chan error, 1)
	s.reqs <- spawnReq{cmd: cmd, group: g, errc: errc}
	return <-errc
}

func (s *spawner) stop() {
	close(s.reqs)
	<-s.done
}
