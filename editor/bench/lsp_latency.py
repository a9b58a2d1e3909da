"""Edit-to-diagnostics and hover latency of `gantry lsp` (BENCHMARKS.md "Editor").

Usage: python3 editor/bench/lsp_latency.py target/release/gantry /abs/path/to/file.gantry
Opens the file, sends 50 full-text edits (each appends a comment line) and waits for the
diagnostics of each, then 20 hovers; prints medians and p95.
"""
import json, subprocess, time, statistics, sys
binp = sys.argv[1]; path = sys.argv[2]
p = subprocess.Popen([binp, "lsp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
def send(o):
    b = json.dumps(o).encode(); p.stdin.write(b"Content-Length: %d\r\n\r\n" % len(b) + b); p.stdin.flush()
def recv():
    n = int(p.stdout.readline().split(b":")[1]); p.stdout.readline(); return json.loads(p.stdout.read(n))
uri = "file://" + path
def wait_diag():
    while True:
        m = recv()
        if m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri: return m
send({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{}}})
while recv().get("id") != 1: pass
send({"jsonrpc":"2.0","method":"initialized","params":{}})
text = open(path).read()
send({"jsonrpc":"2.0","method":"textDocument/didOpen","params":{"textDocument":{"uri":uri,"languageId":"gantry","version":1,"text":text}}})
wait_diag()
times = []
for v in range(2, 52):
    t = time.perf_counter()
    send({"jsonrpc":"2.0","method":"textDocument/didChange","params":{"textDocument":{"uri":uri,"version":v},"contentChanges":[{"text": text + f"# edit {v}\n"}]}})
    wait_diag(); times.append((time.perf_counter() - t) * 1000)
h = []
for i in range(20):
    t = time.perf_counter()
    send({"jsonrpc":"2.0","id":100+i,"method":"textDocument/hover","params":{"textDocument":{"uri":uri},"position":{"line":5,"character":8}}})
    while recv().get("id") != 100+i: pass
    h.append((time.perf_counter() - t) * 1000)
times.sort(); h.sort()
print(f"{path}: {len(text.splitlines())} lines; edit -> diagnostics median {statistics.median(times):.1f} ms, p95 {times[int(len(times)*0.95)-1]:.1f} ms; hover median {statistics.median(h):.2f} ms")
p.kill()
