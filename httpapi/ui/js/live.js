// Live updates over API.md's WebSocket (/ws), authenticated by the jwt_token
// cookie. One connection per tab; pages subscribe to topics and get the
// server's frames. When /ws is down (or not offered by this master) the
// connection retries with back-off and pages fall back to polling REST:
// live.isLive(topic) tells them which to do.

const RETRY_MIN = 1000;
const RETRY_MAX = 20000;

class Live {
  constructor() {
    this.ws = null;
    this.state = 'idle'; // idle | connecting | open | down
    this.topics = new Map(); // topic -> {handlers:Set, offset:()=>number|undefined, acked:boolean}
    this.stateListeners = new Set();
    this.retry = RETRY_MIN;
    this.timer = 0;
    this.enabled = false;
  }

  // start opens the connection (after sign-in); stop closes it for good.
  start() {
    if (this.enabled) return;
    this.enabled = true;
    this.connect();
  }

  stop() {
    this.enabled = false;
    clearTimeout(this.timer);
    if (this.ws) {
      const ws = this.ws;
      this.ws = null;
      ws.onclose = ws.onerror = ws.onmessage = ws.onopen = null;
      try { ws.close(1000, 'signed out'); } catch { /* closing */ }
    }
    for (const t of this.topics.values()) t.acked = false;
    this.setState('idle');
  }

  // reconnectNow retries at once (e.g. after the tab became visible again).
  reconnectNow() {
    if (!this.enabled || this.state === 'open' || this.state === 'connecting') return;
    clearTimeout(this.timer);
    this.retry = RETRY_MIN;
    this.connect();
  }

  connect() {
    if (!this.enabled) return;
    clearTimeout(this.timer);
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    let ws;
    try {
      ws = new WebSocket(proto + '//' + location.host + '/ws');
    } catch {
      this.scheduleRetry();
      return;
    }
    this.ws = ws;
    this.setState('connecting');
    ws.onopen = () => {
      this.retry = RETRY_MIN;
      this.setState('open');
      for (const [topic, t] of this.topics) this.sendSubscribe(topic, t);
    };
    ws.onmessage = (ev) => this.onMessage(ev.data);
    ws.onclose = () => {
      if (this.ws !== ws) return;
      this.ws = null;
      for (const t of this.topics.values()) t.acked = false;
      this.setState('down');
      this.scheduleRetry();
    };
    ws.onerror = () => { /* onclose follows */ };
  }

  scheduleRetry() {
    if (!this.enabled) return;
    clearTimeout(this.timer);
    const wait = this.retry * (0.75 + Math.random() * 0.5);
    this.retry = Math.min(this.retry * 2, RETRY_MAX);
    this.timer = setTimeout(() => this.connect(), wait);
  }

  setState(s) {
    if (this.state === s) return;
    this.state = s;
    for (const f of this.stateListeners) f(s);
  }

  onState(f) {
    this.stateListeners.add(f);
    return () => this.stateListeners.delete(f);
  }

  send(obj) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) {
      this.ws.send(JSON.stringify(obj));
      return true;
    }
    return false;
  }

  sendSubscribe(topic, t) {
    t.acked = false;
    const op = { op: 'subscribe', topic };
    const off = t.offset ? t.offset() : undefined;
    if (off !== undefined) op.offset = off;
    this.send(op);
  }

  // subscribe registers handler(frame) for topic. opts.offset, a function,
  // gives the byte offset to (re)subscribe a log topic from. It returns the
  // function that unsubscribes.
  subscribe(topic, handler, opts = {}) {
    let t = this.topics.get(topic);
    if (!t) {
      t = { handlers: new Set(), offset: opts.offset, acked: false };
      this.topics.set(topic, t);
      if (this.state === 'open') this.sendSubscribe(topic, t);
    } else if (opts.offset) {
      t.offset = opts.offset;
    }
    t.handlers.add(handler);
    return () => {
      const cur = this.topics.get(topic);
      if (!cur) return;
      cur.handlers.delete(handler);
      if (cur.handlers.size === 0) {
        this.topics.delete(topic);
        this.send({ op: 'unsubscribe', topic });
      }
    };
  }

  // isLive: frames for topic are flowing (connected and acknowledged).
  isLive(topic) {
    const t = this.topics.get(topic);
    return this.state === 'open' && !!t && t.acked;
  }

  onMessage(data) {
    let m;
    try {
      m = JSON.parse(data);
    } catch {
      return;
    }
    if (!m || typeof m !== 'object') return;
    const t = m.topic ? this.topics.get(m.topic) : null;
    if (m.type === 'subscribed' && t) t.acked = true;
    if (m.type === 'error') {
      // An error about a topic ends that subscription; pages go on polling.
      if (t) t.acked = false;
      if (!t) console.warn('rlsched: WebSocket error', m.error);
    }
    if (t) for (const f of Array.from(t.handlers)) f(m);
  }
}

export const live = new Live();

document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'visible') live.reconnectNow();
});

// RESYNC is how often a page that follows a topic live still reloads over
// REST: events dropped on the way (a `lagged` topic, a reconnect) must not
// leave a view stale for good.
const RESYNC = 10000;

// poller runs fn every interval ms while the page is mounted, and only every
// RESYNC ms while live(topic) (when given); never while a run is in flight.
export function poller(fn, interval, topic) {
  let stopped = false, busy = false, last = Date.now();
  const tick = async () => {
    if (stopped || busy) return;
    if (topic && live.isLive(topic) && Date.now() - last < RESYNC) return;
    if (document.visibilityState === 'hidden') return;
    busy = true;
    last = Date.now();
    try { await fn(); } catch { /* shown by the page */ } finally { busy = false; }
  };
  const id = setInterval(tick, interval);
  return () => { stopped = true; clearInterval(id); };
}
