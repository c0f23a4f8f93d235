package isolation

import "syscall"

func atimeNano(st *syscall.Stat_t) int64 { return st.Atim.Nano() }
