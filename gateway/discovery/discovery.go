// Package discovery connects masters and gateways through Nacos
// (nacos-sdk-go/v2): a master registers itself (service rl-master, or
// rl-master-canary) as an ephemeral instance with its metadata and
// deregisters on shutdown; a gateway subscribes to both services and
// updates its routes as instances come and go.
//
// It never decides routing itself: it reports instances (with the
// registry's health) to a callback, and the gateway makes them routes
// (gateway.Gateway.WatchNacos). It never imports the proxy either, so a
// master that registers does not link it.
package discovery

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nacos-group/nacos-sdk-go/v2/clients"
	"github.com/nacos-group/nacos-sdk-go/v2/clients/naming_client"
	"github.com/nacos-group/nacos-sdk-go/v2/common/constant"
	"github.com/nacos-group/nacos-sdk-go/v2/common/logger"
	"github.com/nacos-group/nacos-sdk-go/v2/model"
	"github.com/nacos-group/nacos-sdk-go/v2/vo"
	"github.com/rs/zerolog"
)

// The services masters register as and gateways route to, by these names
// in Nacos and in X-Upstream-Service (API.md, Gateway); the gateway's static
// routes use them too.
const (
	ServiceStable = "rl-master"
	ServiceCanary = "rl-master-canary"
)

// Options of a connection to Nacos.
type Options struct {
	// Addr lists the servers: host:port[,host:port...], "http://" allowed
	// (NACOS_ADDR). The gRPC port is the HTTP port + 1000, as Nacos has it.
	Addr string
	// Username and Password, when the server has auth on (NACOS_USERNAME,
	// NACOS_PASSWORD).
	Username, Password string
	// Namespace id; empty is the public namespace.
	Namespace string
	// Group; default DEFAULT_GROUP.
	Group string
	// Dir holds the SDK's cache and log files; default a directory of this
	// process under os.TempDir(), removed by Close.
	Dir string
	// Timeout of one call to the server; default 5 s.
	Timeout time.Duration
	Logger  zerolog.Logger
}

// client is a naming client and what Close must undo.
type client struct {
	naming naming_client.INamingClient
	group  string
	tmpDir string // removed on close; "" when the caller chose Dir
}

func newClient(o Options) (*client, error) {
	servers, err := parseAddr(o.Addr)
	if err != nil {
		return nil, err
	}
	c := &client{group: o.Group}
	if c.group == "" {
		c.group = constant.DEFAULT_GROUP
	}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "rlsched-nacos-"); err != nil {
			return nil, fmt.Errorf("cannot create a directory for the Nacos client: %w", err)
		}
		c.tmpDir = dir
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	cc := constant.NewClientConfig(
		constant.WithNamespaceId(o.Namespace),
		constant.WithTimeoutMs(uint64(timeout.Milliseconds())),
		constant.WithNotLoadCacheAtStart(true),
		// Without it the SDK keeps the last instance of a service after it
		// leaves (shared/nacos/README.md, pitfall 1).
		constant.WithUpdateCacheWhenEmpty(true),
		// No failover to a stale snapshot on disk: routes follow the server.
		constant.WithDisableUseSnapShot(true),
		constant.WithCacheDir(filepath.Join(dir, "cache")),
		constant.WithLogDir(filepath.Join(dir, "log")),
		constant.WithLogLevel("warn"),
		constant.WithUsername(o.Username),
		constant.WithPassword(o.Password),
	)
	naming, err := clients.NewNamingClient(vo.NacosClientParam{ClientConfig: cc, ServerConfigs: servers})
	// The SDK installs its own file logger on every new client; ours goes
	// to the process's log instead.
	logger.SetLogger(zlog{o.Logger.With().Str("component", "nacos").Logger()})
	if err != nil {
		c.removeDir()
		return nil, fmt.Errorf("cannot connect to Nacos at %s: %w; check NACOS_ADDR", o.Addr, err)
	}
	c.naming = naming
	return c, nil
}

func (c *client) close() {
	if c.naming != nil {
		c.naming.CloseClient()
	}
	c.removeDir()
}

func (c *client) removeDir() {
	if c.tmpDir != "" {
		_ = os.RemoveAll(c.tmpDir)
	}
}

// parseAddr turns NACOS_ADDR into server configs.
func parseAddr(addr string) ([]constant.ServerConfig, error) {
	var out []constant.ServerConfig
	for _, a := range strings.Split(addr, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		scheme := "http"
		if s, rest, ok := strings.Cut(a, "://"); ok {
			scheme, a = s, rest
		}
		a = strings.TrimSuffix(strings.TrimSuffix(a, "/"), "/nacos")
		host, portStr, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("NACOS_ADDR %q: want host:port[,host:port...]", addr)
		}
		port, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil || port == 0 || (scheme != "http" && scheme != "https") {
			return nil, fmt.Errorf("NACOS_ADDR %q: want host:port[,host:port...]", addr)
		}
		out = append(out, *constant.NewServerConfig(host, port, constant.WithScheme(scheme), constant.WithContextPath("/nacos")))
	}
	if len(out) == 0 {
		return nil, errors.New("NACOS_ADDR is empty")
	}
	return out, nil
}

// Instance is a registered master as the registry reports it.
type Instance struct {
	Service  string
	IP       string
	Port     uint64
	Healthy  bool
	Enabled  bool
	Metadata map[string]string // the registrant's keys only
}

// registerPatience bounds the tries of Register.
const registerPatience = 10 * time.Second

// Registration is a master registered in Nacos. Close deregisters it.
type Registration struct {
	c    *client
	inst Instance
	once sync.Once
	log  zerolog.Logger
}

// Register registers inst (ephemeral: the server drops it a few seconds
// after this process dies without deregistering).
func Register(o Options, inst Instance) (*Registration, error) {
	if inst.Service == "" || inst.IP == "" || inst.Port == 0 {
		return nil, errors.New("BUG: discovery.Register needs a service, an IP and a port")
	}
	c, err := newClient(o)
	if err != nil {
		return nil, err
	}
	meta := map[string]string{}
	for k, v := range inst.Metadata {
		meta[k] = v
	}
	// A few tries: a server may refuse a registration that races another
	// (Polaris answers "the same instance request" to simultaneous ones).
	deadline := time.Now().Add(registerPatience)
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		var ok bool
		ok, err = c.naming.RegisterInstance(vo.RegisterInstanceParam{
			Ip: inst.IP, Port: inst.Port, ServiceName: inst.Service, GroupName: c.group,
			Weight: 1, Enable: true, Healthy: true, Ephemeral: true, Metadata: meta,
		})
		if err == nil && !ok {
			err = errors.New("the server refused")
		}
		if err == nil || time.Now().Add(wait).After(deadline) {
			break
		}
		o.Logger.Debug().Err(err).Str("service", inst.Service).Msg("Nacos registration failed; retrying")
		time.Sleep(wait)
	}
	if err != nil {
		c.close()
		return nil, fmt.Errorf("cannot register %s %s:%d in Nacos at %s: %w", inst.Service, inst.IP, inst.Port, o.Addr, err)
	}
	o.Logger.Info().Str("service", inst.Service).Str("instance", net.JoinHostPort(inst.IP, strconv.FormatUint(inst.Port, 10))).
		Str("nacos", o.Addr).Msg("registered in Nacos")
	return &Registration{c: c, inst: inst, log: o.Logger}, nil
}

// Close deregisters the instance and closes the client. Safe to call more
// than once, and on nil.
func (r *Registration) Close() error {
	if r == nil {
		return nil
	}
	var err error
	r.once.Do(func() {
		_, err = r.c.naming.DeregisterInstance(vo.DeregisterInstanceParam{
			Ip: r.inst.IP, Port: r.inst.Port, ServiceName: r.inst.Service, GroupName: r.c.group, Ephemeral: true,
		})
		if err != nil {
			r.log.Warn().Err(err).Str("service", r.inst.Service).Msg("cannot deregister from Nacos; the server drops the instance by itself shortly")
		} else {
			r.log.Info().Str("service", r.inst.Service).Msg("deregistered from Nacos")
		}
		r.c.close()
	})
	return err
}

// Watcher follows services in Nacos and reports their instances.
type Watcher struct {
	c        *client
	onChange func(service string, insts []Instance)
	params   []*vo.SubscribeParam
	mu       sync.Mutex // serialises reports, so they arrive in order
	stop     chan struct{}
	done     chan struct{}
	log      zerolog.Logger
}

// resync re-reads the SDK's cache now and then, in case a push was missed.
const resync = 15 * time.Second

// Watch subscribes to services and calls onChange with the complete list
// of a service's instances at start and after every change. onChange is
// called from one goroutine at a time.
func Watch(o Options, services []string, onChange func(service string, insts []Instance)) (*Watcher, error) {
	c, err := newClient(o)
	if err != nil {
		return nil, err
	}
	w := &Watcher{c: c, onChange: onChange, stop: make(chan struct{}), done: make(chan struct{}), log: o.Logger}
	for _, svc := range services {
		svc := svc
		p := &vo.SubscribeParam{ServiceName: svc, GroupName: c.group,
			SubscribeCallback: func([]model.Instance, error) { w.report(svc) }}
		if err := c.naming.Subscribe(p); err != nil {
			w.unsubscribe()
			c.close()
			return nil, fmt.Errorf("cannot subscribe to %s in Nacos at %s: %w", svc, o.Addr, err)
		}
		w.params = append(w.params, p)
		w.report(svc)
	}
	go w.loop(services)
	return w, nil
}

func (w *Watcher) loop(services []string) {
	defer close(w.done)
	t := time.NewTicker(resync)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			for _, svc := range services {
				w.report(svc)
			}
		}
	}
}

// report reads the service's instances from the SDK's cache (which pushes
// update) and hands them on.
func (w *Watcher) report(svc string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.stop:
		return
	default:
	}
	hosts, err := w.c.naming.SelectAllInstances(vo.SelectAllInstancesParam{ServiceName: svc, GroupName: w.c.group})
	if err != nil {
		w.log.Warn().Err(err).Str("service", svc).Msg("cannot read instances from Nacos")
		return
	}
	insts := make([]Instance, 0, len(hosts))
	for _, h := range hosts {
		meta := map[string]string{}
		for k, v := range h.Metadata {
			// The server adds keys of its own (README, pitfall 2).
			if !strings.HasPrefix(k, "internal-") {
				meta[k] = v
			}
		}
		insts = append(insts, Instance{Service: svc, IP: h.Ip, Port: h.Port, Healthy: h.Healthy, Enabled: h.Enable, Metadata: meta})
	}
	w.onChange(svc, insts)
}

func (w *Watcher) unsubscribe() {
	for _, p := range w.params {
		_ = w.c.naming.Unsubscribe(p)
	}
}

// Close stops reporting and closes the client. Safe to call more than once.
func (w *Watcher) Close() {
	w.mu.Lock()
	select {
	case <-w.stop:
		w.mu.Unlock()
		return
	default:
		close(w.stop)
	}
	w.mu.Unlock()
	<-w.done
	w.unsubscribe()
	w.c.close()
}

// zlog routes the SDK's log to zerolog; its chatty info goes to debug.
type zlog struct{ l zerolog.Logger }

func (z zlog) Info(args ...any)                  { z.l.Debug().Msg(fmt.Sprint(args...)) }
func (z zlog) Warn(args ...any)                  { z.l.Warn().Msg(fmt.Sprint(args...)) }
func (z zlog) Error(args ...any)                 { z.l.Warn().Msg(fmt.Sprint(args...)) }
func (z zlog) Debug(args ...any)                 { z.l.Debug().Msg(fmt.Sprint(args...)) }
func (z zlog) Infof(format string, args ...any)  { z.l.Debug().Msgf(format, args...) }
func (z zlog) Warnf(format string, args ...any)  { z.l.Warn().Msgf(format, args...) }
func (z zlog) Errorf(format string, args ...any) { z.l.Warn().Msgf(format, args...) }
func (z zlog) Debugf(format string, args ...any) { z.l.Debug().Msgf(format, args...) }
