package httpapi

import (
	"context"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/clip"
	"github.com/rlsched/rlsched/notify"
)

// notifyJSON is a user's notification settings (API.md, PUT
// /api/auth/me/notifications).
type notifyJSON struct {
	Webhook string   `json:"webhook"`
	On      []string `json:"on"`
}

func notifyView(n core.Notify) notifyJSON {
	on := n.On
	if n.Webhook != "" && len(on) == 0 {
		on = notify.DefaultOn
	}
	if on == nil {
		on = []string{}
	}
	return notifyJSON{n.Webhook, on}
}

// getNotifications is GET /api/auth/me/notifications.
func (s *Server) getNotifications(r *request) *apiError {
	return s.writeJSON(r, fasthttp.StatusOK, notifyView(r.user.Notify))
}

// putNotifications is PUT /api/auth/me/notifications: the caller's webhook
// and the events it hears of; an empty webhook turns them off. The URL is
// checked, its host resolved, as the master will when it sends.
func (s *Server) putNotifications(r *request) *apiError {
	var b notifyJSON
	if e := decodeJSON(r.ctx.PostBody(), &b); e != nil {
		return e
	}
	n := core.Notify{Webhook: b.Webhook}
	if b.Webhook != "" {
		seen := map[string]bool{}
		for _, e := range b.On {
			if !notify.ValidEvent(e) {
				return errBadRequest("unknown event %q in \"on\": use run statuses %v or warning codes %v", clip.String(e, 64), notify.Statuses, notify.Warnings)
			}
			if !seen[e] {
				seen[e] = true
				n.On = append(n.On, e)
			}
		}
		if len(n.On) == 0 {
			n.On = notify.DefaultOn
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := s.cfg.NotifyTargets.Check(ctx, b.Webhook)
		cancel()
		if err != nil {
			return errBadRequest("%v", err)
		}
	}
	ctx, cancel := storeCtx()
	defer cancel()
	if err := s.st.SetNotify(ctx, r.user.ID, n); err != nil {
		return storeError(err, "user")
	}
	return s.writeJSON(r, fasthttp.StatusOK, notifyView(n))
}

// testNotifications is POST /api/auth/me/notifications/test: one test
// message to the caller's webhook, now. The hook's failure is the answer's
// data ({"sent": false, "error": ...}), not the request's: the request
// was fine.
func (s *Server) testNotifications(r *request) *apiError {
	hook := r.user.Notify.Webhook
	if hook == "" {
		return &apiError{fasthttp.StatusConflict, codeConflict, "no webhook is set: PUT /api/auth/me/notifications {\"webhook\": URL} first (rlsched notify set URL)"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	err := notify.SendTest(ctx, s.cfg.NotifyTargets, hook, r.user.Username)
	cancel()
	ans := struct {
		Sent    bool   `json:"sent"`
		Webhook string `json:"webhook"`
		Error   string `json:"error,omitempty"`
	}{Sent: err == nil, Webhook: hook}
	if err != nil {
		ans.Error = clip.String(err.Error(), 512)
	}
	return s.writeJSON(r, fasthttp.StatusOK, ans)
}
