// TerminalView shows an interactive run's terminal (issue 34) to its owner:
// the WebSocket /ws/sessions/<id> (signed in by the page's cookie), its
// output as plain text (escape sequences dropped: this is not a terminal
// emulator, `rlsched attach` is), and a line to type into. The server sends
// the recent screen first, so opening the page shows where the session is.

import { h } from './util.js';

const KEEP = 64 << 10; // characters shown, as the master's ring

// plain drops what a terminal would interpret rather than show: CSI and OSC
// sequences, other escapes, carriage returns before a newline, bells.
function plain(s) {
  return s
    .replace(/\x1b\[[0-9;?<>=]*[ -\/]*[@-~]/g, '')
    .replace(/\x1b\][^\x07\x1b]*(\x07|\x1b\\)/g, '')
    .replace(/\x1b[@-_]/g, '')
    .replace(/\r+\n/g, '\n')
    .replace(/[\x00-\x08\x0b-\x1f\x7f]/g, '');
}

export class TerminalView {
  constructor(taskId) {
    this.id = taskId;
    this.text = '';
    this.pre = h('pre', { class: 'terminal-view', id: 'terminal-text', tabindex: '0', 'aria-label': 'Terminal' });
    this.status = h('span', { class: 'info', id: 'terminal-status' }, 'connecting…');
    this.input = h('input', { type: 'text', id: 'terminal-input', placeholder: 'Type a line and press Enter (Ctrl-C, Ctrl-D as in a terminal)', 'aria-label': 'Terminal input', autocomplete: 'off' });
    this.input.addEventListener('keydown', (e) => {
      if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return;
      // Ctrl-C and Ctrl-D go as the bytes a terminal sends (the remote
      // terminal signals its foreground job, or ends the input), unless
      // text is selected for copying.
      const ctl = e.ctrlKey && !e.altKey && !e.metaKey && { c: '\x03', d: '\x04' }[e.key.toLowerCase()];
      if (ctl && this.input.selectionStart === this.input.selectionEnd) {
        e.preventDefault();
        this.ws.send(new TextEncoder().encode(ctl));
        return;
      }
      if (e.key !== 'Enter') return;
      e.preventDefault();
      this.ws.send(new TextEncoder().encode(this.input.value + '\r'));
      this.input.value = '';
    });
    this.el = h('section', { class: 'card', id: 'terminal', 'aria-label': 'Terminal' },
      h('div', { class: 'card-head' }, h('h2', null, 'Terminal'), this.status, h('span', { class: 'spacer' }),
        h('span', { class: 'muted' }, 'rlsched attach ' + taskId + ' for a full terminal')),
      this.pre, this.input);
    this.decoder = new TextDecoder('utf-8');
    this.connect();
  }

  connect() {
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const ws = new WebSocket(proto + '//' + location.host + '/ws/sessions/' + encodeURIComponent(this.id));
    ws.binaryType = 'arraybuffer';
    this.ws = ws;
    ws.onopen = () => { this.status.textContent = 'attached'; };
    ws.onmessage = (ev) => {
      if (typeof ev.data !== 'string') {
        this.append(this.decoder.decode(new Uint8Array(ev.data), { stream: true }));
        return;
      }
      let m = {};
      try { m = JSON.parse(ev.data); } catch { return; }
      if (m.ended) this.status.textContent = 'ended ' + m.ended.status;
      else if (m.error) this.status.textContent = m.error;
      else if (m.lagged) this.append('\n[some output was dropped here; the log has it]\n');
    };
    ws.onclose = () => {
      if (!this.status.textContent.startsWith('ended')) this.status.textContent = 'detached';
      this.input.disabled = true;
    };
  }

  append(s) {
    const follow = this.pre.scrollTop + this.pre.clientHeight >= this.pre.scrollHeight - 4;
    this.text = (this.text + plain(s)).slice(-KEEP);
    this.pre.textContent = this.text;
    if (follow) this.pre.scrollTop = this.pre.scrollHeight;
  }

  destroy() {
    if (this.ws) this.ws.close();
  }
}
