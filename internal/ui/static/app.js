// converge ui: follows /events and swaps the fragments that changed; sends actions
// after a confirmation. No inline script anywhere: the CSP allows only this file.
(function () {
  'use strict';
  var $ = function (s) { return document.querySelector(s); };

  function get(url) {
    return fetch(url, { credentials: 'same-origin', headers: { Accept: 'text/html' } }).then(function (r) {
      if (r.status === 204) { return null; }
      return r.text().then(function (t) { if (!r.ok) { throw new Error(t || String(r.status)); } return t; });
    });
  }
  function parse(html) {
    var t = document.createElement('template');
    t.innerHTML = html.trim();
    return t.content;
  }
  // debounce runs fn once per key after a quiet 150 ms.
  var timers = {};
  function debounce(key, fn) {
    clearTimeout(timers[key]);
    timers[key] = setTimeout(function () { delete timers[key]; fn(); }, 150);
  }

  // Overview: one row per SyncTarget, and the counts and graph.
  var tbody = $('#targets tbody'), summary = $('#summary');
  // A row is found by its link: /targets/<namespace>/<name>.
  function rowOf(href) {
    var a = $('#targets').querySelector('tbody a[href="' + CSS.escape(href) + '"]');
    return a ? a.closest('tr') : null;
  }
  function refreshRow(key) {
    var href = '/targets/' + key;
    get('/fragments/row/' + key + location.search).then(function (html) {
      var old = rowOf(href);
      if (html === null) { if (old) { old.remove(); } return; }
      var row = parse('<table><tbody>' + html + '</tbody></table>').querySelector('tr');
      if (old) { old.replaceWith(row); return; }
      // Grouped, a new SyncTarget's place is its group's: the page is read again.
      if ($('#targets').dataset.grouped) { debounce('reload', function () { location.reload(); }); return; }
      var next = Array.prototype.find.call(tbody.rows, function (r) {
        return r.querySelector('a').getAttribute('href') > href;
      });
      // On a page of many, a new SyncTarget that sorts before or after this page's rows
      // belongs to another page.
      if ((!next && $('a[rel=next]')) || (next === tbody.rows[0] && $('a[rel=prev]'))) { return; }
      tbody.insertBefore(row, next || null);
    }).catch(function () {});
  }
  function refreshSummary() {
    get('/fragments/overview' + location.search).then(function (html) {
      if (html !== null) { summary.innerHTML = html; }
    }).catch(function () {});
  }

  // Target page: what an object owns (a Deployment's ReplicaSets and Pods) is read when its
  // node is opened, and again when the page follows a change; open nodes stay open.
  var openOwned = {};
  function loadOwned(d) {
    var body = d.querySelector('.ownsbody');
    get(d.dataset.src).then(function (html) { body.innerHTML = html || ''; })
      .catch(function (e) { body.textContent = e.message; });
  }
  function wireOwned(root) {
    root.querySelectorAll('details.owns').forEach(function (d) {
      if (openOwned[d.dataset.src]) { d.open = true; loadOwned(d); }
      d.addEventListener('toggle', function () {
        if (d.open) { openOwned[d.dataset.src] = true; loadOwned(d); } else { delete openOwned[d.dataset.src]; }
      });
    });
  }

  // Buttons that load a fragment into the element data-load names, when pressed.
  document.addEventListener('click', function (ev) {
    var b = ev.target.closest ? ev.target.closest('button[data-load]') : null;
    if (!b) { return; }
    var into = document.querySelector(b.dataset.load);
    into.textContent = 'Reading…';
    get(b.dataset.src).then(function (html) { into.innerHTML = html || ''; })
      .catch(function (e) { into.textContent = e.message; });
  });

  // Target page: everything but the diff follows the cluster.
  var live = $('#live'), diff = $('#diff');
  if (live) { wireOwned(live); }
  function refreshLive() {
    get(live.dataset.src).then(function (html) {
      if (html === null) { return; }
      var a = document.activeElement, sel = null;
      if (a && live.contains(a) && a.dataset.action) {
        sel = '[data-action="' + CSS.escape(a.dataset.action) + '"]' + (a.dataset.to ? '[data-to="' + CSS.escape(a.dataset.to) + '"]' : '');
      }
      var before = fetched(), kept = {};
      // What a button loaded (versions, values) stays, as open nodes do.
      live.querySelectorAll('[data-keep]').forEach(function (k) { if (k.id) { kept[k.id] = k.innerHTML; } });
      live.innerHTML = html;
      Object.keys(kept).forEach(function (id) { var k = document.getElementById(id); if (k) { k.innerHTML = kept[id]; } });
      wireOwned(live);
      if (sel) { var b = live.querySelector(sel); if (b) { b.focus(); } }
      if (diff && fetched() !== before) { loadDiff(); }
      document.body.dataset.updated = String(Date.now());
    }).catch(function () {});
  }
  // fetched is the revision fetched last: the diff is computed anew when it moves.
  function fetched() {
    var t = live.querySelector('[data-fetched]');
    return t ? t.dataset.fetched : '';
  }
  function loadDiff() {
    diff.setAttribute('aria-busy', 'true');
    diff.innerHTML = '<p class="empty">Computing the diff…</p>';
    get(diff.dataset.src).then(function (html) { diff.innerHTML = html || ''; })
      .catch(function (e) { diff.innerHTML = ''; var p = document.createElement('p'); p.className = 'error'; p.textContent = e.message; diff.appendChild(p); })
      .then(function () { diff.removeAttribute('aria-busy'); });
  }

  function onChange(e) {
    var key = e.data;
    if (tbody) { debounce('row ' + key, function () { refreshRow(key); }); debounce('summary', refreshSummary); }
    if (live && live.dataset.key === key) { debounce('live', refreshLive); }
  }
  if (tbody || live) {
    var conn = $('#conn'), es = new EventSource('/events');
    es.onopen = function () { conn.textContent = 'live'; conn.classList.add('on'); document.body.dataset.live = 'on'; };
    es.onerror = function () {
      conn.classList.remove('on');
      // A refused stream (429: too many open tabs) is not retried: say so.
      if (es.readyState === EventSource.CLOSED) {
        conn.textContent = 'not live'; conn.title = 'live updates were refused (too many open tabs?): reload the page to try again';
        document.body.dataset.live = 'refused';
      } else { conn.textContent = 'reconnecting…'; }
    };
    es.addEventListener('target', onChange);
    es.addEventListener('event', onChange);
    es.addEventListener('reload', function () { if (live) { refreshLive(); } else { location.reload(); } });
  }
  // An object's diff (data-lazy) costs a render of the whole SyncTarget: computed when asked.
  if (diff) { if (!diff.dataset.lazy) { loadDiff(); } $('#diff-refresh').addEventListener('click', loadDiff); }

  // Object page: a container's log, streamed as text (never parsed as HTML); following
  // it keeps the request open, a new choice ends the one before.
  var logpane = $('#logpane'), logAbort = null, logLink = null;
  function showLog() {
    if (logAbort) { logAbort.abort(); }
    var ctl = new AbortController(), out = $('#log');
    logAbort = ctl;
    out.textContent = '';
    var url = logLink.getAttribute('href') + ($('#log-follow').checked ? '&follow=1' : '') + ($('#log-previous').checked ? '&previous=1' : '');
    $('#log-title').textContent = logLink.dataset.pod + ' · ' + logLink.dataset.container;
    fetch(url, { credentials: 'same-origin', signal: ctl.signal }).then(function (r) {
      if (!r.ok) { return r.text().then(function (t) { var d = parse(t); out.textContent = (d.querySelector('main') || d).textContent.trim() || String(r.status); }); }
      var reader = r.body.getReader(), dec = new TextDecoder();
      function pump() {
        return reader.read().then(function (c) {
          if (c.done) { return; }
          var atEnd = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
          out.textContent += dec.decode(c.value, { stream: true });
          if (atEnd) { out.scrollTop = out.scrollHeight; }
          return pump();
        });
      }
      return pump();
    }).catch(function (e) { if (e.name !== 'AbortError') { out.textContent += '\n[' + e.message + ']'; } })
      .then(function () { if (logAbort === ctl) { document.body.dataset.logDone = String(Date.now()); } });
  }
  if (logpane) {
    document.querySelectorAll('a.logs').forEach(function (a) {
      a.addEventListener('click', function (ev) { ev.preventDefault(); logLink = a; logpane.hidden = false; showLog(); });
    });
    $('#log-follow').addEventListener('change', function () { if (logLink) { showLog(); } });
    $('#log-previous').addEventListener('change', function () { if (logLink) { showLog(); } });
  }

  // Actions: confirm in a dialog, then POST with the header no other origin can send.
  var dialog = $('#confirm'), pendingAction = null;
  function flash(ok, text) {
    var p = document.createElement('p');
    p.className = ok ? 'ok' : 'bad';
    p.textContent = text;
    var f = $('#flash');
    f.replaceChildren(p);
    setTimeout(function () { if (p.parentNode) { p.remove(); } }, ok ? 8000 : 30000);
  }
  function send(a) {
    var body = new URLSearchParams();
    if (a.to) { body.set('to', a.to); }
    fetch('/targets/' + a.target + '/' + a.action, {
      method: 'POST', credentials: 'same-origin', body: body,
      headers: { 'X-Converge-Action': '1' }
    }).then(function (r) { return r.json(); }).then(function (res) {
      flash(res.ok, res.message);
      if (live) { refreshLive(); }
    }).catch(function (e) { flash(false, e.message); });
  }
  document.addEventListener('click', function (e) {
    var b = e.target.closest('[data-action]');
    if (!b) { return; }
    pendingAction = { action: b.dataset.action, to: b.dataset.to || '', target: b.closest('[data-target]').dataset.target, button: b };
    $('#confirm-text').textContent = b.dataset.confirm;
    dialog.returnValue = '';
    dialog.showModal();
    $('#confirm-ok').focus();
  });
  if (dialog) {
    dialog.addEventListener('close', function () {
      var a = pendingAction;
      pendingAction = null;
      if (!a) { return; }
      if (dialog.returnValue === 'ok') { send(a); }
      if (document.body.contains(a.button)) { a.button.focus(); }
    });
  }
}());
