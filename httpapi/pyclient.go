package httpapi

import "github.com/rlsched/rlsched/scripts"

// pyClientFile is scripts/rlsched.py as embedded in the binary: the Python
// client (and the run helpers beside it) a notebook fetches from
// GET /rlsched.py, public like the dashboard's files.
var pyClientFile = loadPyClient()

func loadPyClient() uiFile {
	b, err := scripts.FS.ReadFile("rlsched.py")
	if err != nil {
		panic("BUG: the embedded rlsched.py is unreadable: " + err.Error())
	}
	return embedded(b, "text/x-python; charset=utf-8")
}

// pythonClient is GET /rlsched.py.
func (s *Server) pythonClient(r *request) *apiError { return serveEmbedded(r, pyClientFile, false) }
