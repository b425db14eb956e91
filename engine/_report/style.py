"""The report's style sheet and its one script (the transcript filter), inline in every
``report.html`` and allowed there by hash in its Content-Security-Policy; the viewer
serves the same style sheet for the report sections it shows."""

__all__ = ["REPORT_CSS", "REPORT_JS"]

REPORT_CSS = """
:root{--fg:#1d2433;--muted:#667085;--line:#e4e7ec;--bg:#f7f8fa;--card:#fff}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);
font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1220px;margin:0 auto;padding:20px 24px 60px}
h1{font-size:22px;margin:0 0 12px}h2{font-size:17px;margin:28px 0 10px}
h3{font-size:14px;margin:0 0 6px}h3 small{color:var(--muted);font-weight:400}
code,pre{font:12.5px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:0}
.muted{color:var(--muted)}
.facts{display:flex;flex-wrap:wrap;gap:8px}
.fact{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:6px 12px}
.fact span{display:block;color:var(--muted);font-size:11px;text-transform:uppercase}
.warn{background:#fff4e5;border:1px solid #f5c27a;border-radius:6px;padding:8px 12px}
.tables{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
table{border-collapse:collapse;background:var(--card);border:1px solid var(--line)}
th,td{padding:4px 10px;border-bottom:1px solid var(--line);text-align:right}
th[scope=row],thead th{text-align:left;font-weight:600}
td.who{text-align:left;font-size:12px}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:16px}
figure{margin:0;background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px}
figcaption{font-weight:600;margin-bottom:4px}
svg.plot{width:100%;height:auto;display:block}
svg .grid{stroke:#eef0f3}svg .axis{stroke:#98a2b3;fill:none}
svg text{font-size:11px;fill:#475467}svg .label{font-size:12px;fill:#1d2433}
svg .val{font-size:10px}svg .empty{text-anchor:middle;fill:#98a2b3}
#transcript-filter{margin:0 0 10px;display:flex;gap:10px;align-items:center}
#filter-text{width:320px;padding:4px 8px}
details.transcript{background:var(--card);border:1px solid var(--line);border-radius:8px;
margin:0 0 6px}
details.transcript>summary{padding:6px 12px;cursor:pointer}
.episode-body{padding:0 14px 12px;border-top:1px solid var(--line)}
.badge{border-radius:10px;padding:0 8px;font-size:12px}
.badge.ok{background:#dcfae6;color:#067647}.badge.bad{background:#fee4e2;color:#b42318}
.ep-rewards{color:var(--muted);margin-left:8px}
.trace{border-left:3px solid var(--line);padding:4px 0 4px 12px;margin:12px 0}
.kv{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12.5px;margin-bottom:6px}
.kv i,.info i{color:var(--muted);font-style:normal}.info{margin:0 0 6px;font-size:12px}
.msg{border-radius:6px;padding:6px 10px;margin:4px 0;border:1px solid transparent}
.msg .role,.msg>summary .role{font-size:11px;font-weight:700;text-transform:uppercase}
.msg>summary{cursor:pointer}.teaser{color:var(--muted)}
.msg .role .muted{text-transform:none;font-weight:400}
.role-system,.role-developer{background:#f2f4f7;border-color:#e4e7ec}
.role-user{background:#eff8ff;border-color:#b2ddff}.role-user .role{color:#175cd3}
.role-assistant{background:#ecfdf3;border-color:#abefc6}.role-assistant .role{color:#067647}
.role-tool{background:#fffaeb;border-color:#fedf89}.role-tool .role{color:#b54708}
.role-other{background:#f9f5ff;border-color:#e9d7fe}
.tool-call{margin-top:4px}.msg-image{max-width:360px;max-height:360px;display:block}
.remote-image{margin:4px 0;color:#b54708}
table.turns{font-size:12px;margin-top:6px}
.errors{background:#fef3f2;border:1px solid #fecdca;border-radius:6px;padding:6px 10px;
margin:6px 0}.errors ul{margin:4px 0 0;padding-left:18px}td.error{color:#b42318;text-align:left}
.elided{color:var(--muted);font-style:italic}
.env-section h2{margin-top:28px}
details.env-box{background:var(--card);border:1px solid var(--line);border-radius:8px;
margin:0 0 6px}details.env-box>summary{padding:6px 12px;cursor:pointer}
details.env-box>.table-wrap{padding:0 12px 10px}
.table-wrap{overflow-x:auto;max-width:100%}
table.env-table{font-size:12.5px;width:100%}
table.env-table td{text-align:left;vertical-align:top;overflow-wrap:break-word}
table.env-table td.mono{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
table.env-table th{white-space:nowrap}
.tag{border-radius:10px;padding:0 8px;font-size:12px;font-weight:600;white-space:nowrap}
.tag.t0{background:#dbeafe;color:#0b4f8a}.tag.t1{background:#fdecc8;color:#8a5300}
.tag.t2{background:#d3f5e6;color:#05603a}.tag.t3{background:#fbe3f1;color:#8c2b63}
.tag.t4{background:#e0f2fe;color:#075985}.tag.t5{background:#fde2d3;color:#9a3412}
.tag.t6{background:#eceef2;color:#475467}
@media (max-width:900px){.plots{grid-template-columns:1fr}main{padding:14px 12px 40px}}
#config pre{background:var(--card);border:1px solid var(--line);padding:10px}
#config summary h2{display:inline}#config summary{cursor:pointer}
"""

REPORT_JS = """
(function () {
  var box = document.getElementById("transcript-filter");
  if (!box) return;
  box.hidden = false;
  var items = Array.prototype.slice.call(document.querySelectorAll("details.transcript"));
  var text = document.getElementById("filter-text");
  var bad = document.getElementById("filter-bad");
  function apply() {
    var q = text.value.toLowerCase();
    items.forEach(function (d) {
      d.hidden = !((!q || d.dataset.search.indexOf(q) >= 0) &&
                   (!bad.checked || d.dataset.bad === "1"));
    });
  }
  function openAll(open) {
    items.forEach(function (d) { if (!d.hidden) d.open = open; });
  }
  text.addEventListener("input", apply);
  bad.addEventListener("change", apply);
  document.getElementById("expand-all").onclick = function () { openAll(true); };
  document.getElementById("collapse-all").onclick = function () { openAll(false); };
})();
"""
