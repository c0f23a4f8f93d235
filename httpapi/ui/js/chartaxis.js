// The axes of a line chart: nice linear ticks, decades on a log scale, and
// time ticks (relative durations or wall-clock times) for series whose x is
// a Unix second, never written as a "step".

import { fmtNum } from './util.js';

export function niceTicks(min, max, count) {
  if (!(max > min)) {
    const d = Math.abs(min) > 0 ? Math.abs(min) * 0.1 : 1;
    min -= d; max += d;
  }
  const raw = (max - min) / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const f = raw / mag;
  const step = (f >= 7.5 ? 10 : f >= 3.5 ? 5 : f >= 1.5 ? 2 : 1) * mag;
  const lo = Math.floor(min / step) * step;
  const hi = Math.ceil(max / step) * step;
  const ticks = [];
  // lo + i·step, not a running sum, and a value within a rounding error of
  // zero is zero: a sum of steps wrote 0 as -5.55e-17.
  for (let i = 0, v = lo; v <= hi + step * 1e-6 && i < 100; i++, v = lo + i * step) {
    ticks.push(Math.abs(v) < step * 1e-9 ? 0 : Number(v.toPrecision(12)));
  }
  return { lo, hi, ticks, step };
}

// logTicks spans [min, max] (both > 0) with whole decades, and 2 and 5
// within them when the span is short, in log10 units: lo and hi are
// exponents, ticks values.
export function logTicks(min, max) {
  let lo = Math.floor(Math.log10(min)), hi = Math.ceil(Math.log10(max));
  if (hi === lo) { lo -= 0.5; hi += 0.5; }
  const ticks = [];
  const decades = hi - lo;
  for (let e = Math.floor(lo); e <= Math.ceil(hi); e++) {
    for (const m of decades <= 2 ? [1, 2, 5] : decades <= 5 ? [1, 3] : [1]) {
      const v = m * 10 ** e;
      const lv = Math.log10(v);
      if (lv >= lo - 1e-9 && lv <= hi + 1e-9) ticks.push(Number(v.toPrecision(12)));
    }
  }
  return { lo, hi, ticks };
}

const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800];

// timeTicks are ticks of seconds at a round interval (1 s to a week).
export function timeTicks(min, max, count) {
  if (!(max > min)) max = min + 1;
  const want = (max - min) / Math.max(1, count);
  const step = TIME_STEPS.find((s) => s >= want) || Math.ceil(want / 604800) * 604800;
  const ticks = [];
  for (let v = Math.ceil(min / step) * step, i = 0; v <= max + 1e-6 && i < 100; v += step, i++) ticks.push(v);
  return { lo: min, hi: max, ticks, step };
}

// fmtRelative writes seconds as a duration: 45s, 12:30, 1:02:03, 2d 03h.
export function fmtRelative(sec) {
  const neg = sec < 0;
  let s = Math.round(Math.abs(sec));
  const d = Math.floor(s / 86400); s -= d * 86400;
  const hr = Math.floor(s / 3600); s -= hr * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  const pad = (n) => String(n).padStart(2, '0');
  let out;
  if (d) out = d + 'd ' + pad(hr) + 'h';
  else if (hr) out = hr + ':' + pad(m) + ':' + pad(s);
  else if (m) out = m + ':' + pad(s);
  else out = s + 's';
  return (neg ? '-' : '') + out;
}

// fmtWall writes a Unix second as the local clock time (with the date when
// the chart spans days).
export function fmtWall(sec, long) {
  const d = new Date(sec * 1000);
  const t = d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: long ? '2-digit' : undefined });
  return long === 'date' ? d.toLocaleDateString([], { month: 'short', day: 'numeric' }) + ' ' + t : t;
}

// X_MODES are the x axes a chart offers: steps for a series of steps, time
// since the start or the clock for a series of Unix seconds.
export const X_MODES = {
  step: { label: 'step', title: 'Step' },
  relative: { label: 'time since start', title: 'Relative time' },
  wall: { label: 'wall time', title: 'Wall time' },
};

// xAxis is how a chart in mode writes and places x values; origin is the
// relative mode's zero (a Unix second).
export function xAxis(mode, origin) {
  if (mode === 'relative') {
    return { label: X_MODES.relative.label, value: (x) => x - origin, fmt: fmtRelative, ticks: timeTicks, time: true };
  }
  if (mode === 'wall') {
    return { label: X_MODES.wall.label, value: (x) => x, fmt: (v, span) => fmtWall(v, span > 2 * 86400 ? 'date' : span < 600), ticks: timeTicks, time: true };
  }
  return { label: X_MODES.step.label, value: (x) => x, fmt: (v) => fmtNum(v, 3), ticks: niceTicks, time: false };
}
