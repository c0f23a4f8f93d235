package logpipe

// A LOG_DIR shared by several masters (WriterConfig.SharedDir): a run's
// worker may write through master A, move to B when A is unreachable, and
// come back. A's writer then holds the file open with the size and offsets
// it last wrote, which B's appends made stale; staging frames against them
// would answer "gap" for bytes the file has, or append bytes twice. So with
// a shared dir every batch checks the size of an already open file first
// (one fstat) and reads the file's state again when another writer grew it.

// revalidate makes rf's state match the file when the dir is shared.
func (s *writerShard) revalidate(rf *runFile) error {
	if !s.w.cfg.SharedDir {
		return nil
	}
	fi, err := rf.f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() == rf.st.size {
		return nil
	}
	rf.known = false
	return rf.recover()
}
