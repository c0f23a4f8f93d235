package dispatch

import "github.com/rlsched/rlsched/core"

// workerChanged reports a worker's new view to Config.OnWorker.
func (m *Master) workerChanged(id string) {
	if m.cfg.OnWorker == nil {
		return
	}
	if info, ok := m.reg.info(id, m.cfg.MasterID); ok {
		m.cfg.OnWorker(info)
	}
}

// Workers lists every known worker, sorted by id.
func (m *Master) Workers() []core.WorkerInfo { return m.reg.infos(m.cfg.MasterID) }
