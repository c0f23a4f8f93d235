package httpapi

import (
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/clip"
	"github.com/rlsched/rlsched/store"
)

// The admins' user administration (API.md, "Users, privacy,
// notifications"): list, create, change (role, disabled, password) and
// delete. Every route is admin-only in the router's table.

// adminUserJSON is a user as an admin sees it.
type adminUserJSON struct {
	ID          int64      `json:"id"`
	Username    string     `json:"username"`
	Role        core.Role  `json:"role"`
	Disabled    bool       `json:"disabled"`
	CreatedAt   time.Time  `json:"createdAt"`
	LastLoginAt *time.Time `json:"lastLoginAt"`
}

func adminUserView(u core.User) adminUserJSON {
	return adminUserJSON{u.ID, u.Username, u.Role, u.Disabled, u.CreatedAt.UTC(), u.LastLoginAt}
}

// userItemJSON is one user of the admins' list, with their runs.
type userItemJSON struct {
	adminUserJSON
	Runs       int     `json:"runs"`
	ActiveRuns int     `json:"activeRuns"`
	GPUSeconds float64 `json:"gpuSeconds"`
}

// listUsers is GET /api/admin/users.
func (s *Server) listUsers(r *request) *apiError {
	ctx, cancel := storeCtx()
	defer cancel()
	us, err := s.st.ListUsers(ctx, s.cfg.Now())
	if err != nil {
		return storeError(err, "users")
	}
	items := make([]userItemJSON, len(us))
	for i, u := range us {
		items[i] = userItemJSON{adminUserView(u.User), u.Runs, u.ActiveRuns, u.GPUSeconds}
	}
	return s.writeJSON(r, fasthttp.StatusOK, struct {
		Items []userItemJSON `json:"items"`
	}{items})
}

// addUser is POST /api/admin/users: an account made by an admin, whatever
// REGISTRATION says.
func (s *Server) addUser(r *request) *apiError {
	var b struct {
		credentials
		Role core.Role `json:"role"`
	}
	if e := decodeJSON(r.ctx.PostBody(), &b); e != nil {
		return e
	}
	if b.Role == "" {
		b.Role = core.RoleUser
	}
	if b.Role != core.RoleUser && b.Role != core.RoleAdmin {
		return errBadRequest("role must be USER or ADMIN")
	}
	u, e := s.createUser(b.credentials, b.Role, false)
	if e != nil {
		return e
	}
	s.log.Info().Str("traceId", r.trace).Int64("by", r.user.ID).Str("user", u.Username).Str("role", string(u.Role)).Msg("user added")
	return s.writeJSON(r, fasthttp.StatusCreated, adminUserView(u))
}

// patchUser is PATCH /api/admin/users/{username}.
func (s *Server) patchUser(r *request) *apiError {
	var b struct {
		Role     *core.Role `json:"role"`
		Disabled *bool      `json:"disabled"`
		Password *string    `json:"password"`
	}
	if e := decodeJSON(r.ctx.PostBody(), &b); e != nil {
		return e
	}
	if b.Role == nil && b.Disabled == nil && b.Password == nil {
		return errBadRequest("nothing to change: give any of role, disabled, password")
	}
	if b.Role != nil && *b.Role != core.RoleUser && *b.Role != core.RoleAdmin {
		return errBadRequest("role must be USER or ADMIN")
	}
	p := store.UserPatch{Role: b.Role, Disabled: b.Disabled}
	if b.Password != nil {
		hash, e := s.hashPassword(*b.Password)
		if e != nil {
			return e
		}
		p.PasswordHash = &hash
	}
	u, e := s.userOfPath(r)
	if e != nil {
		return e
	}
	ctx, cancel := storeCtx()
	defer cancel()
	u, err := s.st.UpdateUser(ctx, u.ID, p)
	if err != nil {
		return userStoreError(err, r.param)
	}
	s.log.Info().Str("traceId", r.trace).Int64("by", r.user.ID).Str("user", u.Username).Str("role", string(u.Role)).
		Bool("disabled", u.Disabled).Bool("newPassword", b.Password != nil).Msg("user changed")
	return s.writeJSON(r, fasthttp.StatusOK, adminUserView(u))
}

// deleteUser is DELETE /api/admin/users/{username}: the user's runs stay.
func (s *Server) deleteUser(r *request) *apiError {
	u, e := s.userOfPath(r)
	if e != nil {
		return e
	}
	ctx, cancel := storeCtx()
	defer cancel()
	if err := s.st.DeleteUser(ctx, u.ID); err != nil {
		return userStoreError(err, r.param)
	}
	s.log.Info().Str("traceId", r.trace).Int64("by", r.user.ID).Str("user", u.Username).Int64("userId", u.ID).Msg("user deleted")
	r.ctx.SetStatusCode(fasthttp.StatusNoContent)
	return nil
}

// userOfPath is the user {username} of the path names.
func (s *Server) userOfPath(r *request) (core.User, *apiError) {
	if !core.ValidUsername(r.param) {
		return core.User{}, errNotFound("user " + clip.String(r.param, 64))
	}
	ctx, cancel := storeCtx()
	defer cancel()
	u, err := s.st.UserByName(ctx, r.param)
	if err != nil {
		return core.User{}, storeError(err, "user "+r.param)
	}
	return u, nil
}

func userStoreError(err error, name string) *apiError {
	if errors.Is(err, store.ErrLastAdmin) {
		return &apiError{fasthttp.StatusConflict, codeConflict, "cannot change " + name + ": " + store.ErrLastAdmin.Error()}
	}
	return storeError(err, "user "+name)
}
