package worker

import (
	"os/exec"
	"runtime"
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
	cmd  *exec.Cmd
	errc chan error
}

func startSpawner() *spawner {
	s := &spawner{reqs: make(chan spawnReq), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		runtime.LockOSThread() // never unlocked: the thread ends with the worker
		for req := range s.reqs {
			req.errc <- req.cmd.Start()
		}
	}()
	return s
}

// start runs cmd.Start on the spawner's thread.
func (s *spawner) start(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	s.reqs <- spawnReq{cmd: cmd, errc: errc}
	return <-errc
}

func (s *spawner) stop() {
	close(s.reqs)
	<-s.done
}
