package core

// MaskedEnvValue stands in for every env value of a run its viewer may not
// read.
const MaskedEnvValue = "***"

// MaskEnv returns t with every env value replaced by MaskedEnvValue (the
// names stay): a run's env values are its owner's and the admins' to see
// (they often hold credentials). t itself is not changed.
func (t Task) MaskEnv() Task {
	if len(t.Env) == 0 {
		return t
	}
	m := make(map[string]string, len(t.Env))
	for k := range t.Env {
		m[k] = MaskedEnvValue
	}
	t.Env = m
	return t
}

// EnvVisibleTo reports whether u may read the env values of t.
func (t Task) EnvVisibleTo(u User) bool { return t.UserID == u.ID || u.Role == RoleAdmin }
