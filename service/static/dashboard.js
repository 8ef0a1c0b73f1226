// novikoff dashboard: polls this service's own `stats` and `stats/history` and draws the
// learning curve as hand-made SVG. No framework, no build step, nothing from another origin.
"use strict";

(() => {
  const REFRESH_MS = 1000;
  const SVG_NS = "http://www.w3.org/2000/svg";
  const REF_COLOURS = 6;
  const MARGIN = { top: 16, right: 20, bottom: 48, left: 64 };
  const MIN_CHART_HEIGHT = 280;
  const MAX_CHART_HEIGHT = 520;
  const CHART_ASPECT = 0.6;
  const Y_HEADROOM = 1.06;
  const X_TICKS_PER_PX = 1 / 110;
  const Y_TICKS_PER_PX = 1 / 52;
  const RATIO_WARN = 0.8;
  const MIN_TICK_GAP_PX = 16;
  const SCALE_KEY = "novikoff.scale";
  const TOKEN_KEY = "novikoff.token";
  const UNAUTHORIZED = 401;
  const FORBIDDEN = 403;

  const state = {
    stats: null,
    history: null,
    series: null,
    scale: readScale(),
    layout: null,
    token: readToken(),
  };

  function readToken() {
    try {
      return sessionStorage.getItem(TOKEN_KEY) || "";
    } catch {
      return "";
    }
  }

  const $ = (selector, root = document) => root.querySelector(selector);
  const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));

  function readScale() {
    try {
      return localStorage.getItem(SCALE_KEY) === "log" ? "log" : "linear";
    } catch {
      return "linear";
    }
  }

  // ---------------------------------------------------------------- number formatting

  const intFormat = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
  const rateFormat = new Intl.NumberFormat("en-US", {
    minimumFractionDigits: 1,
    maximumFractionDigits: 1,
  });

  function formatNumber(value) {
    if (value === null || value === undefined || Number.isNaN(value)) return "–";
    if (!Number.isFinite(value)) return value > 0 ? "∞" : "−∞";
    if (Number.isInteger(value) && Math.abs(value) < 1e15) return intFormat.format(value);
    if (Math.abs(value) >= 1000) return intFormat.format(Math.round(value));
    if (value === 0) return "0";
    return String(Number(value.toPrecision(4)));
  }

  function formatCompact(value) {
    const abs = Math.abs(value);
    if (abs >= 1e9) return `${trim(value / 1e9)}G`;
    if (abs >= 1e6) return `${trim(value / 1e6)}M`;
    if (abs >= 1e4) return `${trim(value / 1e3)}k`;
    return formatNumber(value);
  }

  function trim(value) {
    return String(Number(value.toPrecision(3)));
  }

  function formatPercent(ratio) {
    if (!Number.isFinite(ratio)) return "–";
    const pct = ratio * 100;
    return `${pct < 10 ? pct.toFixed(1) : Math.round(pct)}%`;
  }

  // ---------------------------------------------------------------- stats panel

  function setStat(key, raw, text) {
    for (const node of $$(`[data-stat="${key}"]`)) {
      node.dataset.value = raw === null || raw === undefined ? "" : String(raw);
      node.textContent = text;
    }
  }

  function sumValues(object) {
    return Object.values(object || {}).reduce((total, count) => total + Number(count), 0);
  }

  function renderStats(stats) {
    setStat("ready", stats.ready, stats.ready ? "ready" : "not ready");
    setStat("seen", stats.seen, formatNumber(stats.seen));
    setStat("mistakes", stats.mistakes, formatNumber(stats.mistakes));
    const rate = stats.events_per_second;
    setStat("events_per_second", rate, Number.isFinite(rate) ? rateFormat.format(rate) : "–");
    const invalid = sumValues(stats.invalid);
    setStat("invalid", invalid, formatNumber(invalid));
    setStat("lag", stats.lag, formatNumber(stats.lag));
    setStat("model_version", stats.model_version, formatNumber(stats.model_version));
    setStat("radius", stats.radius, formatNumber(stats.radius));
    const share = stats.seen > 0 ? stats.mistakes / stats.seen : null;
    setStat("mistake_rate", share, share === null ? "–" : formatPercent(share));
    $("#model-version-badge").textContent = formatNumber(stats.model_version);
    const prequential = stats.prequential_mistakes || {};
    for (const predictor of ["last", "averaged", "voted"]) {
      const count = prequential[predictor];
      setStat(`prequential.${predictor}`, count, formatNumber(count));
    }
    const margin = stats.margin_estimate || {};
    setStat("margin_estimate", margin.value, formatNumber(margin.value));
    $("#margin-window").textContent = margin.window ? `over the last ${formatNumber(margin.window)} events (diagnostic, not a certificate)` : "";
    renderReferences(stats);
    renderMixing(stats.mixing);
    renderInvalidReasons(stats.invalid || {});
    renderPartitions(stats.partitions || []);
  }

  function renderPartitions(partitions) {
    $("#partitions").replaceChildren(
      ...partitions.map((row) => {
        const tr = document.createElement("tr");
        tr.dataset.partition = `${row.topic}/${row.partition}`;
        for (const [field, text] of [
          ["name", `${row.topic}/${row.partition}`],
          ["next_offset", formatNumber(row.next_offset)],
          ["lag", formatNumber(row.lag)],
        ]) {
          const td = document.createElement("td");
          td.dataset.field = field;
          td.textContent = text;
          tr.append(td);
        }
        return tr;
      }),
    );
  }

  function renderReferences(stats) {
    const body = $("#refs");
    const names = stats.bounds.map((ref) => ref.name);
    if (body.dataset.names !== JSON.stringify(names)) {
      body.replaceChildren(...stats.bounds.map((ref, index) => referenceRow(ref.name, index)));
      body.dataset.names = JSON.stringify(names);
    }
    $("#refs-empty").hidden = stats.bounds.length > 0;
    stats.bounds.forEach((ref, index) => {
      const row = body.rows[index];
      setField(row, "gamma", ref.gamma, formatNumber(ref.gamma));
      setField(row, "k", ref.k, formatNumber(ref.k));
      setField(row, "bound", ref.bound, formatNumber(ref.bound));
      const ratio = ref.bound > 0 ? stats.mistakes / ref.bound : Number.NaN;
      const ratioCell = setField(row, "ratio", Number.isFinite(ratio) ? ratio : null, formatPercent(ratio));
      ratioCell.className = ratio > 1 ? "over" : ratio > RATIO_WARN ? "high" : "";
      row.dataset.violated = String(Boolean(ref.violated));
      const title = [
        `Novikoff (R/γ)²: ${formatNumber(ref.novikoff)}`,
        `min margin: ${formatNumber(ref.min_margin)}`,
        ref.violated ? "VIOLATED: mistakes exceeded this bound" : "bound holds",
      ].join("\n");
      row.title = title;
      const flag = $(".violated-flag", row);
      flag.hidden = !ref.violated;
    });
  }

  // Mixing mode only: the distributed (IPM) bound per reference, over all shards' mistakes.
  function renderMixing(mixing) {
    const card = $("#mixing-card");
    card.hidden = !mixing;
    if (!mixing) return;
    for (const key of ["round", "partitions", "mistakes"]) {
      const node = $(`[data-mixing="${key}"]`, card);
      node.dataset.value = String(mixing[key]);
      node.textContent = formatNumber(mixing[key]);
    }
    const body = $("#mixing-refs");
    const statuses = mixing.bound || [];
    const names = statuses.map((ref) => ref.name);
    if (body.dataset.names !== JSON.stringify(names)) {
      body.replaceChildren(...statuses.map((ref, index) => referenceRow(ref.name, index, ["k_mixed", "total_bound", "ratio"])));
      body.dataset.names = JSON.stringify(names);
    }
    statuses.forEach((ref, index) => {
      const row = body.rows[index];
      setField(row, "k_mixed", ref.k_mixed, formatNumber(ref.k_mixed));
      setField(row, "total_bound", ref.total_bound, formatNumber(ref.total_bound));
      const ratio = ref.total_bound > 0 ? ref.total_mistakes / ref.total_bound : Number.NaN;
      const ratioCell = setField(row, "ratio", Number.isFinite(ratio) ? ratio : null, formatPercent(ratio));
      ratioCell.className = ratio > 1 ? "over" : ratio > RATIO_WARN ? "high" : "";
      row.dataset.violated = String(Boolean(ref.violated));
      row.title = [
        `rounds mixed: ${formatNumber(ref.rounds)}, γ: ${formatNumber(ref.gamma)}`,
        `M̃ = ${formatNumber(ref.mixed_mistakes)} ≤ ${formatNumber(ref.bound)}`,
        ref.violated ? "VIOLATED: mistakes exceeded this bound" : "bound holds",
      ].join("\n");
      $(".violated-flag", row).hidden = !ref.violated;
    });
  }

  function referenceRow(name, index, fields = ["gamma", "k", "bound", "ratio"]) {
    const row = document.createElement("tr");
    row.dataset.ref = name;
    const nameCell = document.createElement("td");
    const label = document.createElement("span");
    label.className = `name ref-${index % REF_COLOURS}`;
    const text = document.createElement("span");
    text.textContent = name;
    label.append(text);
    const flag = document.createElement("span");
    flag.className = "violated-flag";
    flag.textContent = " ⚠";
    flag.hidden = true;
    nameCell.append(label, flag);
    row.append(nameCell);
    for (const field of fields) {
      const cell = document.createElement("td");
      cell.dataset.field = field;
      row.append(cell);
    }
    return row;
  }

  function setField(row, field, raw, text) {
    const cell = $(`[data-field="${field}"]`, row);
    cell.dataset.value = raw === null || raw === undefined ? "" : String(raw);
    cell.textContent = text;
    return cell;
  }

  function renderInvalidReasons(invalid) {
    const list = $("#invalid-reasons");
    const reasons = Object.keys(invalid).sort();
    list.replaceChildren(
      ...reasons.map((reason) => {
        const item = document.createElement("div");
        const term = document.createElement("dt");
        term.textContent = reason;
        const count = document.createElement("dd");
        count.dataset.reason = reason;
        count.dataset.value = String(invalid[reason]);
        count.textContent = formatNumber(invalid[reason]);
        item.append(term, count);
        return item;
      }),
    );
    $("#invalid-none").hidden = reasons.length > 0;
  }

  // ---------------------------------------------------------------- chart data

  // The history (sampled about once a second) plus the live /stats point, so the end of the
  // curve always agrees with the numbers beside it.
  function buildSeries(stats, history) {
    const names = stats.bounds.map((ref) => ref.name);
    const live = {
      seen: stats.seen,
      mistakes: stats.mistakes,
      bounds: Object.fromEntries(stats.bounds.map((ref) => [ref.name, ref.bound])),
    };
    const points = history.points.filter((point) => point.seen <= live.seen);
    const last = points[points.length - 1];
    if (!last || last.seen !== live.seen || last.mistakes !== live.mistakes) points.push(live);
    else points[points.length - 1] = live;
    return { names, points };
  }

  function boundOf(point, name) {
    const value = point.bounds ? point.bounds[name] : undefined;
    return typeof value === "number" && Number.isFinite(value) ? value : null;
  }

  // ---------------------------------------------------------------- scales and ticks

  function niceStep(span, count) {
    const raw = span / Math.max(count, 1);
    const magnitude = 10 ** Math.floor(Math.log10(raw));
    const residual = raw / magnitude;
    const factor =
      residual >= Math.sqrt(50) ? 10 : residual >= Math.sqrt(10) ? 5 : residual >= Math.sqrt(2) ? 2 : 1;
    return factor * magnitude;
  }

  function linearTicks(min, max, count) {
    const step = niceStep(max - min, count);
    const ticks = [];
    for (let value = Math.ceil(min / step) * step; value <= max + step * 1e-9; value += step) {
      ticks.push(Number(value.toPrecision(12)));
    }
    return ticks;
  }

  function logTicks(max, count) {
    const ticks = [0];
    for (let decade = 1; decade <= max; decade *= 10) {
      for (const mantissa of [1, 2, 5]) {
        if (decade * mantissa <= max) ticks.push(decade * mantissa);
      }
    }
    if (ticks.length <= count + 1) return ticks;
    return ticks.filter((value) => value === 0 || Number.isInteger(Math.log10(value)));
  }

  function yTransform(scale) {
    return scale === "log" ? (value) => Math.log10(1 + Math.max(value, 0)) : (value) => value;
  }

  function chartLayout(box, series, scale) {
    const width = Math.max(box.clientWidth, 280);
    const height = Math.round(
      Math.min(Math.max(width * CHART_ASPECT, MIN_CHART_HEIGHT), MAX_CHART_HEIGHT),
    );
    const plot = {
      left: MARGIN.left,
      top: MARGIN.top,
      right: width - MARGIN.right,
      bottom: height - MARGIN.bottom,
    };
    const { points, names } = series;
    const xMin = points.length ? points[0].seen : 0;
    const xMax = Math.max(points.length ? points[points.length - 1].seen : 1, xMin + 1);
    let yMaxValue = 1;
    for (const point of points) {
      yMaxValue = Math.max(yMaxValue, point.mistakes);
      for (const name of names) yMaxValue = Math.max(yMaxValue, boundOf(point, name) ?? 0);
    }
    const toY = yTransform(scale);
    const yTop = scale === "log" ? toY(yMaxValue) * Y_HEADROOM : yMaxValue * Y_HEADROOM;
    const x = (value) => plot.left + ((value - xMin) / (xMax - xMin)) * (plot.right - plot.left);
    const y = (value) => plot.bottom - (toY(value) / yTop) * (plot.bottom - plot.top);
    const yTickCount = Math.max(3, Math.round((plot.bottom - plot.top) * Y_TICKS_PER_PX));
    const xTickCount = Math.max(3, Math.round((plot.right - plot.left) * X_TICKS_PER_PX));
    const yTicks =
      scale === "log"
        ? logTicks(yMaxValue * Y_HEADROOM, yTickCount)
        : linearTicks(0, yMaxValue * Y_HEADROOM, yTickCount);
    return {
      width,
      height,
      plot,
      x,
      y,
      xMin,
      xMax,
      xTicks: linearTicks(xMin, xMax, xTickCount),
      yTicks,
    };
  }

  // ---------------------------------------------------------------- SVG drawing

  function svgNode(name, attributes = {}, parent = null) {
    const node = document.createElementNS(SVG_NS, name);
    for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
    if (parent) parent.append(node);
    return node;
  }

  function linePath(points, x, y, valueOf) {
    let path = "";
    let pen = false;
    for (const point of points) {
      const value = valueOf(point);
      if (value === null) {
        pen = false;
        continue;
      }
      path += `${pen ? "L" : "M"}${x(point.seen).toFixed(1)},${y(value).toFixed(1)}`;
      pen = true;
    }
    return path;
  }

  function areaPath(points, x, y, valueOf, baseline) {
    const defined = points.filter((point) => valueOf(point) !== null);
    if (defined.length < 2) return "";
    const top = linePath(defined, x, y, valueOf);
    const first = x(defined[0].seen).toFixed(1);
    const last = x(defined[defined.length - 1].seen).toFixed(1);
    return `${top}L${last},${baseline.toFixed(1)}L${first},${baseline.toFixed(1)}Z`;
  }

  function drawAxes(svg, layout) {
    const { plot, x, y } = layout;
    const grid = svgNode("g", { class: "grid" }, svg);
    const axes = svgNode("g", { class: "axis" }, svg);
    let previous = Number.POSITIVE_INFINITY;
    for (const tick of layout.yTicks) {
      const py = y(tick);
      if (previous - py < MIN_TICK_GAP_PX) continue;
      previous = py;
      svgNode("line", { x1: plot.left, x2: plot.right, y1: py, y2: py }, grid);
      const label = svgNode(
        "text",
        { x: plot.left - 8, y: py, "text-anchor": "end", "dominant-baseline": "middle" },
        svgNode("g", { class: "tick" }, axes),
      );
      label.textContent = formatCompact(tick);
    }
    for (const tick of layout.xTicks) {
      const px = x(tick);
      svgNode("line", { x1: px, x2: px, y1: plot.top, y2: plot.bottom }, grid);
      const group = svgNode("g", { class: "tick" }, axes);
      svgNode("line", { x1: px, x2: px, y1: plot.bottom, y2: plot.bottom + 5 }, group);
      const label = svgNode("text", { x: px, y: plot.bottom + 18, "text-anchor": "middle" }, group);
      label.textContent = formatCompact(tick);
    }
    svgNode("line", { x1: plot.left, x2: plot.right, y1: plot.bottom, y2: plot.bottom }, axes);
    svgNode("line", { x1: plot.left, x2: plot.left, y1: plot.top, y2: plot.bottom }, axes);
    const xLabel = svgNode(
      "text",
      { class: "axis-label", x: (plot.left + plot.right) / 2, y: layout.height - 8, "text-anchor": "middle" },
      svg,
    );
    xLabel.textContent = "events seen";
    const yMid = (plot.top + plot.bottom) / 2;
    const yLabel = svgNode(
      "text",
      {
        class: "axis-label",
        x: 14,
        y: yMid,
        "text-anchor": "middle",
        transform: `rotate(-90 14 ${yMid})`,
      },
      svg,
    );
    yLabel.textContent = state.scale === "log" ? "cumulative mistakes (log)" : "cumulative mistakes";
  }

  function drawSeries(svg, layout, series) {
    const { points, names } = series;
    const { x, y, plot } = layout;
    names.forEach((name, index) => {
      const colour = `ref-${index % REF_COLOURS}`;
      const valueOf = (point) => boundOf(point, name);
      const area = areaPath(points, x, y, valueOf, plot.bottom);
      if (area) svgNode("path", { class: `bound-area ${colour}`, d: area }, svg);
      svgNode(
        "path",
        { class: `bound-line ${colour}`, d: linePath(points, x, y, valueOf), "data-ref": name },
        svg,
      );
    });
    const mistakesOf = (point) => point.mistakes;
    // An area under a log curve means nothing to the eye, so only the linear view fills it.
    const area = state.scale === "log" ? "" : areaPath(points, x, y, mistakesOf, plot.bottom);
    if (area) svgNode("path", { class: "mistakes-area", d: area }, svg);
    svgNode("path", { class: "mistakes-line", d: linePath(points, x, y, mistakesOf) }, svg);
    const last = points[points.length - 1];
    if (!last) return;
    names.forEach((name, index) => {
      const bound = boundOf(last, name);
      if (bound === null) return;
      svgNode(
        "circle",
        { class: `bound-dot ref-${index % REF_COLOURS}`, cx: x(last.seen), cy: y(bound), r: 4 },
        svg,
      );
    });
    svgNode("circle", { class: "mistakes-dot", cx: x(last.seen), cy: y(last.mistakes), r: 4.5 }, svg);
    drawHeadroom(svg, layout, series, last);
  }

  // A bracket at the newest point from the mistakes up to the tightest bound, labelled with the
  // share of the bound used so far.
  function drawHeadroom(svg, layout, series, last) {
    const bounds = series.names.map((name) => boundOf(last, name)).filter((b) => b !== null);
    if (!bounds.length || last.seen === 0) return;
    const tightest = Math.min(...bounds);
    const { x, y } = layout;
    const bx = x(last.seen) - 14;
    const yM = y(last.mistakes);
    const yB = y(tightest);
    const violated = last.mistakes > tightest;
    const group = svgNode("g", { class: `headroom${violated ? " violated" : ""}` }, svg);
    svgNode("line", { x1: bx, x2: bx, y1: yM, y2: yB }, group);
    svgNode("line", { x1: bx - 4, x2: bx + 4, y1: yB, y2: yB }, group);
    svgNode("line", { x1: bx - 4, x2: bx + 4, y1: yM, y2: yM }, group);
    const ratio = tightest > 0 ? last.mistakes / tightest : Number.NaN;
    const text = violated ? "above the bound!" : `M = ${formatPercent(ratio)} of bound`;
    const labelY = Math.abs(yM - yB) > 22 ? (yM + yB) / 2 : Math.min(yM, yB) - 10;
    const label = svgNode(
      "text",
      { x: bx - 8, y: labelY, "text-anchor": "end", "dominant-baseline": "middle" },
      group,
    );
    label.textContent = text;
  }

  function renderChart() {
    const box = $("#chart");
    const svg = $("#chart-svg");
    const series = state.series;
    if (!series) return;
    const layout = chartLayout(box, series, state.scale);
    state.layout = layout;
    svg.setAttribute("viewBox", `0 0 ${layout.width} ${layout.height}`);
    svg.setAttribute("height", String(layout.height));
    const fresh = svgNode("g");
    drawAxes(fresh, layout);
    drawSeries(fresh, layout, series);
    svgNode("g", { class: "crosshair", id: "crosshair" }, fresh);
    svg.replaceChildren(fresh);
    const last = series.points[series.points.length - 1];
    box.dataset.seen = String(last ? last.seen : 0);
    box.dataset.mistakes = String(last ? last.mistakes : 0);
    box.dataset.points = String(series.points.length);
    $("#chart-empty").hidden = Boolean(last && last.seen > 0);
    renderLegend(series, last);
  }

  function renderLegend(series, last) {
    const items = [legendItem("mistakes", "mistakes M", last ? last.mistakes : null, "mistakes")];
    series.names.forEach((name, index) => {
      const item = legendItem(
        `ref-${index % REF_COLOURS}`,
        `bound · ${name}`,
        last ? boundOf(last, name) : null,
        "dashed",
      );
      item.dataset.ref = name;
      items.push(item);
    });
    $("#legend").replaceChildren(...items);
  }

  function legendItem(colourClass, text, value, swatchClass) {
    const item = document.createElement("li");
    item.className = colourClass;
    const swatch = document.createElement("span");
    swatch.className = `swatch ${swatchClass}`;
    const label = document.createElement("span");
    label.className = "label";
    label.textContent = text;
    const number = document.createElement("span");
    number.className = "value";
    number.textContent = formatNumber(value);
    item.append(swatch, label, number);
    return item;
  }

  // ---------------------------------------------------------------- hover read-out

  function nearestPoint(points, seen) {
    let low = 0;
    let high = points.length - 1;
    while (low < high) {
      const mid = (low + high) >> 1;
      if (points[mid].seen < seen) low = mid + 1;
      else high = mid;
    }
    if (low > 0 && Math.abs(points[low - 1].seen - seen) < Math.abs(points[low].seen - seen)) {
      return points[low - 1];
    }
    return points[low];
  }

  function onPointer(event) {
    const { layout, series } = state;
    if (!layout || !series || !series.points.length) return;
    const svg = $("#chart-svg");
    const rect = svg.getBoundingClientRect();
    const px = ((event.clientX - rect.left) / rect.width) * layout.width;
    if (px < layout.plot.left || px > layout.plot.right) return hideHover();
    const seen = layout.xMin + ((px - layout.plot.left) / (layout.plot.right - layout.plot.left)) * (layout.xMax - layout.xMin);
    const point = nearestPoint(series.points, seen);
    const cross = $("#crosshair");
    const cx = layout.x(point.seen);
    cross.replaceChildren();
    svgNode("line", { x1: cx, x2: cx, y1: layout.plot.top, y2: layout.plot.bottom }, cross);
    const tooltip = $("#tooltip");
    const lines = [
      ["events", formatNumber(point.seen)],
      ["mistakes", formatNumber(point.mistakes)],
      ...series.names.map((name) => [`bound ${name}`, formatNumber(boundOf(point, name))]),
    ];
    tooltip.replaceChildren(
      ...lines.map(([key, value], index) => {
        const row = document.createElement("div");
        const strong = document.createElement("b");
        strong.textContent = value;
        row.append(document.createTextNode(`${key} `), strong);
        if (index > 1) row.className = `ref-${(index - 2) % REF_COLOURS}`;
        return row;
      }),
    );
    tooltip.hidden = false;
    const scale = rect.width / layout.width;
    const left = cx * scale + 12;
    const width = tooltip.offsetWidth;
    tooltip.style.left = `${left + width > rect.width ? cx * scale - width - 12 : left}px`;
  }

  function hideHover() {
    $("#tooltip").hidden = true;
    const cross = $("#crosshair");
    if (cross) cross.replaceChildren();
  }

  // ---------------------------------------------------------------- polling

  // A 401 or 403: polling stops until a token with the read scope is entered.
  class AuthError extends Error {
    constructor(status) {
      super(`HTTP ${status}`);
      this.status = status;
    }
  }

  async function fetchJson(url) {
    const headers = { Accept: "application/json" };
    if (state.token) headers.Authorization = `Bearer ${state.token}`;
    const response = await fetch(url, { cache: "no-store", headers });
    if (response.status === UNAUTHORIZED || response.status === FORBIDDEN) {
      throw new AuthError(response.status);
    }
    if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
    return response.json();
  }

  function askForToken(status) {
    const reason = !state.token
      ? "This service needs a token with the read scope."
      : status === FORBIDDEN
        ? "This token lacks the read scope; enter another."
        : "This token was refused; enter another.";
    $("#token-reason").textContent = reason;
    $("#token-form").hidden = false;
    $("#token-input").focus();
    document.body.dataset.connection = "token";
    $("#connection").textContent = "waiting for a token";
  }

  function useToken(event) {
    event.preventDefault();
    state.token = $("#token-input").value.trim();
    try {
      sessionStorage.setItem(TOKEN_KEY, state.token);
    } catch {
      // Storage refused: the token still works until the page is reloaded.
    }
    $("#token-input").value = "";
    $("#token-form").hidden = true;
    refresh();
  }

  function setConnection(ok, detail) {
    document.body.dataset.connection = ok ? "live" : "lost";
    const now = new Date().toLocaleTimeString();
    $("#connection").textContent = ok
      ? `live · updated ${now}`
      : `connection lost (${detail}) · retrying`;
    if (!ok) {
      const ready = $("#ready");
      ready.dataset.value = "";
      ready.textContent = "offline";
    }
  }

  let timer = null;

  async function refresh() {
    clearTimeout(timer);
    try {
      // The numbers matter more than the curve: without a history the chart shows the live point.
      const [stats, history] = await Promise.all([
        fetchJson("stats"),
        fetchJson("stats/history").catch((error) => {
          if (error instanceof AuthError) throw error;
          return { capacity: 0, points: [] };
        }),
      ]);
      state.stats = stats;
      state.history = history;
      state.series = buildSeries(stats, history);
      renderStats(stats);
      renderChart();
      setConnection(true);
      document.body.dataset.updated = String(Date.now());
    } catch (error) {
      if (error instanceof AuthError) {
        askForToken(error.status);
        return;
      }
      setConnection(false, error.message || String(error));
    }
    timer = setTimeout(refresh, REFRESH_MS);
  }

  function setScale(scale) {
    state.scale = scale;
    try {
      localStorage.setItem(SCALE_KEY, scale);
    } catch {
      // Private windows may refuse storage; the toggle still works for this visit.
    }
    for (const button of $$(".scale-toggle button")) {
      button.setAttribute("aria-pressed", String(button.dataset.scale === scale));
    }
    renderChart();
  }

  function start() {
    for (const button of $$(".scale-toggle button")) {
      button.addEventListener("click", () => setScale(button.dataset.scale));
    }
    setScale(state.scale);
    $("#token-form").addEventListener("submit", useToken);
    const svg = $("#chart-svg");
    svg.addEventListener("pointermove", onPointer);
    svg.addEventListener("pointerdown", onPointer);
    svg.addEventListener("pointerleave", hideHover);
    let frame = 0;
    new ResizeObserver(() => {
      cancelAnimationFrame(frame);
      frame = requestAnimationFrame(renderChart);
    }).observe($("#chart"));
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden) refresh();
    });
    refresh();
  }

  start();
})();
