// LogStream follows one run's log by byte offset: REST catch-up first, then
// the WebSocket topic /topic/logs/<id> from where REST stopped, REST again
// for any gap (a `lagged` frame, a reconnect) and, while the WebSocket is
// down, REST polling every 2 s. Every byte reaches onText once, in order.

import { api } from './api.js';
import { live, poller } from './live.js';

const CHUNK = 4 << 20;
const POLL_MS = 2000;

const NL = 10;

export class LogStream {
  // onText(text) gets each new piece; onProgress({next, eof, live}) after
  // each step; onError(err) on failures (the stream keeps trying). rank
  // picks a multi-node group's member: another than rank 0 has no live
  // topic, so its log is polled.
  constructor(taskId, { onText, onProgress, onError, rank = 0 } = {}) {
    this.id = taskId;
    this.rank = rank;
    this.topic = rank > 0 ? null : '/topic/logs/' + taskId;
    this.next = 0;
    this.eof = false;
    this.ended = false; // the run ended: read to the end, then stop
    this.onText = onText || (() => {});
    this.onProgress = onProgress || (() => {});
    this.onError = onError || (() => {});
    this.queue = Promise.resolve();
    this.abort = new AbortController();
    this.stopped = false;
    this.unsub = null;
    this.stopPoll = null;
    this.decoder = new TextDecoder();
  }

  get live() { return this.topic !== null && live.isLive(this.topic); }

  // start begins following; the promise settles when the first catch-up
  // (everything written so far) has been delivered.
  start() {
    const first = this.enqueue(async () => {
      await this.catchUp();
      if (this.stopped || this.eof || !this.topic) return;
      this.unsub = live.subscribe(this.topic, (m) => this.onFrame(m), { offset: () => this.next });
    });
    this.stopPoll = poller(() => this.enqueue(() => this.catchUp()), POLL_MS, this.topic);
    return first;
  }

  stop() {
    this.stopped = true;
    this.abort.abort();
    if (this.unsub) this.unsub();
    if (this.stopPoll) this.stopPoll();
    this.unsub = this.stopPoll = null;
  }

  // runEnded: the run reached a terminal state; read the rest, then stop following.
  runEnded() {
    if (this.ended) return;
    this.ended = true;
    this.enqueue(async () => {
      for (let i = 0; i < 50 && !this.eof && !this.stopped; i++) {
        await this.catchUp();
        if (!this.eof) await new Promise((r) => setTimeout(r, 300));
      }
      if (!this.eof) this.finish();
    });
  }

  // finish stops following: the log is complete (or the run ended and
  // the rest did not come).
  finish() {
    if (this.unsub) this.unsub();
    if (this.stopPoll) this.stopPoll();
    this.unsub = this.stopPoll = null;
    this.onProgress({ next: this.next, eof: this.eof, live: false });
  }

  enqueue(fn) {
    this.queue = this.queue.then(() => (this.stopped ? null : fn())).catch((e) => {
      if (e && e.name === 'AbortError') return;
      this.onError(e);
    });
    return this.queue;
  }

  progress() {
    if (this.eof) this.finish();
    else this.onProgress({ next: this.next, eof: false, live: this.live });
  }

  emit(bytes) {
    if (!bytes.length) return;
    this.onText(this.decoder.decode(bytes));
  }

  // catchUp reads from next to the current end of the file in whole lines
  // (a live run's unfinished last line waits for its end), or to the very end
  // once the run ended.
  async catchUp() {
    for (;;) {
      if (this.stopped || this.eof) return;
      const r = await api.logBytes(this.id, this.next, CHUNK, this.abort.signal, this.rank);
      if (this.stopped) return; // a read that ended after stop(): its bytes are another view's no more
      let b = r.bytes;
      if (!b.length) {
        this.eof = r.eof;
        this.progress();
        return;
      }
      const full = r.bytes.length >= CHUNK;
      if (!r.eof) {
        const i = b.lastIndexOf(NL);
        if (i >= 0) b = b.subarray(0, i + 1);
        else if (!full) { this.progress(); return; } // only an unfinished line so far
      }
      this.emit(b);
      this.next += b.length;
      this.eof = r.eof && b.length === r.bytes.length;
      this.progress();
      if (!full && b.length === r.bytes.length) return;
      if (!full && !this.ended) return;
    }
  }

  // catchUpTo reads the exact bytes [next, target): the gap before a frame.
  async catchUpTo(target) {
    while (this.next < target && !this.stopped) {
      const r = await api.logBytes(this.id, this.next, Math.min(CHUNK, target - this.next), this.abort.signal, this.rank);
      if (this.stopped || !r.bytes.length) return;
      this.emit(r.bytes);
      this.next += r.bytes.length;
    }
    this.progress();
  }

  onFrame(m) {
    if (m.type === 'subscribed') {
      this.enqueue(async () => this.progress());
    } else if (m.type === 'lagged') {
      const to = Number(m.offset);
      this.enqueue(() => (Number.isFinite(to) ? this.catchUpTo(to) : this.catchUp()));
    } else if (m.type === 'log' && typeof m.data === 'string') {
      this.enqueue(() => this.onLog(m));
    } else if (m.type === 'error') {
      this.enqueue(async () => this.progress()); // polling takes over
    }
  }

  async onLog(m) {
    const off = Number(m.offset);
    if (!Number.isFinite(off)) return;
    let end = Number(m.nextOffset);
    let bytes = null;
    if (!Number.isFinite(end)) {
      bytes = new TextEncoder().encode(m.data);
      end = off + bytes.length;
    }
    if (end <= this.next) return; // already have it
    if (off > this.next) await this.catchUpTo(off);
    if (end <= this.next) return;
    if (off < this.next) {
      // Overlap with what REST gave: keep only the new bytes.
      bytes ??= new TextEncoder().encode(m.data);
      this.emit(bytes.subarray(bytes.length - (end - this.next)));
    } else {
      this.onText(m.data);
    }
    this.next = end;
    this.progress();
  }
}

// downloadLog saves the whole log (rank's, of a multi-node group) as a
// file, reading it in chunks.
export async function downloadLog(taskId, rank = 0) {
  const parts = [];
  let off = 0;
  for (;;) {
    const r = await api.logBytes(taskId, off, 8 << 20, undefined, rank);
    if (!r.bytes.length) break;
    parts.push(r.bytes);
    off += r.bytes.length;
    if (r.bytes.length < 8 << 20) break;
  }
  const url = URL.createObjectURL(new Blob(parts, { type: 'text/plain' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = taskId + (rank > 0 ? '.rank' + rank : '') + '.log';
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}
