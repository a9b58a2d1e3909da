//! `gantry lsp` driven over stdio with JSON-RPC, as an editor would: initialize, open a
//! policy with an error and get its diagnostic, fix it and get none, hover (a stdlib node
//! shape with its doc comment; an expression's type), go to a definition in another file
//! and into the stdlib, completion of job fields and units, formatting, document symbols,
//! and bad input (garbage, positions outside the document, unknown files, rapid edits).

#![allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test code: a failed lookup should fail the test"
)]

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

struct Lsp {
    child: Child,
    stdin: ChildStdin,
    incoming: Receiver<Value>,
    next_id: i64,
    /// Notifications seen while waiting for responses.
    notes: Vec<Value>,
}

impl Lsp {
    fn start() -> Lsp {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gantry"))
            .arg("lsp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, incoming) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            loop {
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let line = line.trim();
                    if line.is_empty() {
                        break;
                    }
                    if let Some(v) = line.strip_prefix("Content-Length:") {
                        length = v.trim().parse().unwrap();
                    }
                }
                let mut body = vec![0; length];
                if reader.read_exact(&mut body).is_err() {
                    return;
                }
                if tx.send(serde_json::from_slice(&body).unwrap()).is_err() {
                    return;
                }
            }
        });
        Lsp {
            child,
            stdin,
            incoming,
            next_id: 0,
            notes: Vec::new(),
        }
    }

    fn send_raw(&mut self, body: &[u8]) {
        write!(self.stdin, "Content-Length: {}\r\n\r\n", body.len()).unwrap();
        self.stdin.write_all(body).unwrap();
        self.stdin.flush().unwrap();
    }

    fn notify(&mut self, method: &str, params: Value) {
        let body = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.send_raw(body.to_string().as_bytes());
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if params_absent(&body) {
            body.as_object_mut().unwrap().remove("params");
        }
        self.send_raw(body.to_string().as_bytes());
        loop {
            let msg = self.receive();
            if msg.get("id") == Some(&json!(id)) && msg.get("method").is_none() {
                return msg;
            }
            self.notes.push(msg);
        }
    }

    fn receive(&mut self) -> Value {
        self.incoming
            .recv_timeout(Duration::from_secs(30))
            .expect("the server answered within 30 s")
    }

    /// The next diagnostics published for `uri` (skipping other messages).
    fn diagnostics_for(&mut self, uri: &str) -> Vec<Value> {
        if let Some(i) = self.notes.iter().position(|n| {
            n["method"] == "textDocument/publishDiagnostics" && n["params"]["uri"] == uri
        }) {
            let n = self.notes.remove(i);
            return n["params"]["diagnostics"].as_array().unwrap().clone();
        }
        loop {
            let msg = self.receive();
            if msg["method"] == "textDocument/publishDiagnostics" && msg["params"]["uri"] == uri {
                return msg["params"]["diagnostics"].as_array().unwrap().clone();
            }
        }
    }
}

/// The `key` of every item in a response's result list.
fn strings<'v>(response: &'v Value, key: &str) -> Vec<&'v str> {
    response["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i[key].as_str().unwrap())
        .collect()
}

fn params_absent(body: &Value) -> bool {
    body["params"].is_null()
}

impl Drop for Lsp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gantry-lsp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

fn at(uri: &str, line: u32, character: u32) -> Value {
    json!({"textDocument": {"uri": uri}, "position": {"line": line, "character": character}})
}

const FLEET: &str = "use std.nodes.{dgx_h100}\nuse std.tiers\n\npool training { capacity = reserved; node = dgx_h100; nodes = 4 }\n";
const BROKEN: &str = "# The ML team.\nteam ml { guaranteed = 80 GiB in training }\n\nrule big: warn if job.gpus > 16 gpu \"big job\"\n";
const FIXED: &str = "# The ML team.\nteam ml { guaranteed = 8 gpu in training }\n\nrule big: warn if job.gpus > 16 gpu \"big job\"\n";

#[test]
fn an_editor_session() {
    let dir = scratch("session");
    std::fs::write(dir.join("fleet.gantry"), FLEET).unwrap();
    std::fs::write(dir.join("teams.gantry"), BROKEN).unwrap();
    let teams = uri(&dir.join("teams.gantry"));
    let mut lsp = Lsp::start();
    let init = lsp.request(
        "initialize",
        json!({"processId": null, "rootUri": uri(&dir), "capabilities": {}}),
    );
    let caps = &init["result"]["capabilities"];
    for cap in [
        "hoverProvider",
        "definitionProvider",
        "documentFormattingProvider",
        "documentSymbolProvider",
    ] {
        assert_eq!(caps[cap], true, "{cap}");
    }
    assert!(caps["completionProvider"].is_object());
    lsp.notify("initialized", json!({}));

    // Open with a unit mistake: the same code and span as `gantry check`.
    lsp.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": teams, "languageId": "gantry", "version": 1, "text": BROKEN}}),
    );
    let diags = lsp.diagnostics_for(&teams);
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert_eq!(diags[0]["code"], "E0302");
    assert_eq!(diags[0]["severity"], 1);
    assert_eq!(
        diags[0]["range"]["start"],
        json!({"line": 1, "character": 23})
    );
    assert_eq!(
        diags[0]["range"]["end"],
        json!({"line": 1, "character": 29})
    );
    assert!(diags[0]["message"]
        .as_str()
        .unwrap()
        .contains("expected a gpu quantity"));

    // Fixed: no diagnostics.
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": teams, "version": 2}, "contentChanges": [{"text": FIXED}]}),
    );
    assert_eq!(lsp.diagnostics_for(&teams), Vec::<Value>::new());

    // Hover on an expression: its type.
    let hover = lsp.request("textDocument/hover", at(&teams, 1, 24));
    let text = hover["result"]["contents"]["value"].as_str().unwrap();
    assert!(text.contains("gpu quantity"), "{text}");
    // Hover on a job field inside a rule condition.
    let hover = lsp.request("textDocument/hover", at(&teams, 3, 23));
    let text = hover["result"]["contents"]["value"].as_str().unwrap();
    assert!(text.contains("job.gpus"), "{text}");

    // Go to a definition in another file of the policy.
    let def = lsp.request("textDocument/definition", at(&teams, 1, 38));
    assert_eq!(def["result"]["uri"], uri(&dir.join("fleet.gantry")));
    assert_eq!(def["result"]["range"]["start"]["line"], 3);

    // In fleet.gantry: hover on a stdlib node shape shows its definition and doc comment,
    // and go-to-definition opens the stdlib module.
    let fleet = uri(&dir.join("fleet.gantry"));
    let hover = lsp.request("textDocument/hover", at(&fleet, 3, 47));
    let text = hover["result"]["contents"]["value"].as_str().unwrap();
    assert!(text.contains("node dgx_h100"), "{text}");
    assert!(text.contains("DGX H100"), "doc comment: {text}");
    assert!(text.contains("std.nodes"), "{text}");
    let def = lsp.request("textDocument/definition", at(&fleet, 3, 47));
    let target = def["result"]["uri"].as_str().unwrap();
    assert!(target.ends_with("std/nodes.gantry"), "{target}");
    let path = target.trim_start_matches("file://");
    let stdlib = std::fs::read_to_string(path).unwrap();
    let line = def["result"]["range"]["start"]["line"].as_u64().unwrap() as usize;
    assert!(stdlib.lines().nth(line).unwrap().contains("dgx_h100"));

    // Completion: job fields after `job.`, units after a number, names elsewhere.
    let edited = format!("{FIXED}rule small: deny if job.\n");
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": teams, "version": 3}, "contentChanges": [{"text": edited}]}),
    );
    let done = lsp.request("textDocument/completion", at(&teams, 4, 24));
    let labels = strings(&done, "label");
    for field in ["gpus", "team", "tier", "pool"] {
        assert!(labels.contains(&field), "{field} in {labels:?}");
    }
    let edited = format!("{FIXED}team data {{ guaranteed = 4 ");
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": teams, "version": 4}, "contentChanges": [{"text": edited}]}),
    );
    let units = lsp.request("textDocument/completion", at(&teams, 4, 30));
    let labels = strings(&units, "label");
    assert!(
        labels.contains(&"gpu") && labels.contains(&"GiB"),
        "{labels:?}"
    );
    let names = lsp.request("textDocument/completion", at(&teams, 4, 0));
    let labels = strings(&names, "label");
    for name in [
        "training",
        "dgx_h100",
        "ml",
        "team",
        "rule",
        "h100_sxm5_80gb",
    ] {
        assert!(labels.contains(&name), "{name} in {labels:?}");
    }

    // Formatting through `gantry fmt`.
    let messy = "team   ml{guaranteed=8 gpu in training}\n";
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": teams, "version": 5}, "contentChanges": [{"text": messy}]}),
    );
    let edits = lsp.request(
        "textDocument/formatting",
        json!({"textDocument": {"uri": teams}, "options": {"tabSize": 2, "insertSpaces": true}}),
    );
    let new_text = edits["result"][0]["newText"].as_str().unwrap();
    assert_eq!(new_text, lang::format::format_source(messy).unwrap());

    // Document symbols: pools, tiers, teams, rules.
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": teams, "version": 6}, "contentChanges": [{"text": FIXED}]}),
    );
    let symbols = lsp.request(
        "textDocument/documentSymbol",
        json!({"textDocument": {"uri": teams}}),
    );
    let names = strings(&symbols, "name");
    assert_eq!(names, ["ml", "big"]);
    let symbols = lsp.request(
        "textDocument/documentSymbol",
        json!({"textDocument": {"uri": fleet}}),
    );
    let names = strings(&symbols, "name");
    assert_eq!(names, ["training"]);

    let shutdown = lsp.request("shutdown", Value::Null);
    assert!(shutdown.get("error").is_none(), "{shutdown}");
    lsp.notify("exit", Value::Null);
}

#[test]
fn bad_input_never_crashes_the_server() {
    let dir = scratch("bad");
    let file = dir.join("p.gantry");
    let doc = uri(&file);
    let mut lsp = Lsp::start();
    lsp.request("initialize", json!({"processId": null, "capabilities": {}}));
    lsp.notify("initialized", json!({}));
    // Garbage text, then a huge document, then fifty rapid edits.
    let garbage = "}}} team { = = \u{0}\u{7f} rule: deny if if if \"unterminated\n";
    lsp.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": doc, "languageId": "gantry", "version": 1, "text": garbage}}),
    );
    assert!(!lsp.diagnostics_for(&doc).is_empty());
    let huge: String = (0..20_000)
        .map(|i| format!("team t{i} {{ guaranteed = 1 gpu }}\n"))
        .collect();
    lsp.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": doc, "version": 2}, "contentChanges": [{"text": huge}]}),
    );
    for v in 3..53 {
        let text = format!("team t {{ guaranteed = {v} gpu }}\n");
        lsp.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": doc, "version": v}, "contentChanges": [{"text": text}]}),
        );
    }
    // Positions outside the document and unknown documents get empty answers.
    for method in [
        "textDocument/hover",
        "textDocument/definition",
        "textDocument/completion",
    ] {
        let answer = lsp.request(method, at(&doc, 9_999, 9_999));
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        let answer = lsp.request(method, at("file:///nowhere/x.gantry", 0, 0));
        assert!(answer.get("error").is_none(), "{method}: {answer}");
    }
    // A malformed message gets a JSON-RPC error, and the server keeps going.
    lsp.send_raw(
        b"{\"jsonrpc\": \"2.0\", \"id\": 999, \"method\": \"textDocument/hover\", \"params\": 7}",
    );
    // Issue 16, item 8: messages that are not JSON, not JSON-RPC, or have no
    // Content-Length are answered with an error (id null) and the server goes on.
    lsp.send_raw(b"{not json}");
    lsp.send_raw(br#"{"hello": "world"}"#);
    write!(lsp.stdin, "Garbage-Header\r\n\r\n").unwrap();
    let mut codes = Vec::new();
    while codes.len() < 3 {
        let reply = lsp.incoming.recv_timeout(Duration::from_secs(10)).unwrap();
        if reply.get("method").is_some() {
            lsp.notes.push(reply); // a notification meanwhile
            continue;
        }
        if reply["id"] == 999 {
            // The malformed hover's own answer, which may come after the others.
            assert_eq!(reply["error"]["code"], -32602, "{reply}");
            continue;
        }
        assert_eq!(reply["id"], Value::Null, "{reply}");
        codes.push(reply["error"]["code"].as_i64().unwrap());
    }
    assert_eq!(codes, [-32700, -32600, -32700]);
    let hover = lsp.request("textDocument/hover", at(&doc, 0, 6));
    assert!(hover.get("error").is_none(), "{hover}");
    let text = hover["result"]["contents"]["value"].as_str().unwrap_or("");
    assert!(
        text.contains("team t"),
        "the newest edit is the one analysed: {text}"
    );
    lsp.request("shutdown", Value::Null);
    lsp.notify("exit", Value::Null);
    let status = lsp.child.wait().unwrap();
    assert!(status.success(), "{status}");
}

/// Issue 23: a diagnostic's machine-applicable fix is a quick fix in the editor (the same
/// edit `gantry check --format json` prints).
#[test]
fn quick_fixes_apply_the_did_you_mean() {
    let dir = scratch("quickfix");
    std::fs::write(dir.join("fleet.gantry"), FLEET).unwrap();
    let typo = "team ml { guarnteed = 8 gpu in training }\n";
    std::fs::write(dir.join("teams.gantry"), typo).unwrap();
    let teams = uri(&dir.join("teams.gantry"));
    let mut lsp = Lsp::start();
    let init = lsp.request(
        "initialize",
        json!({"processId": null, "rootUri": uri(&dir), "capabilities": {}}),
    );
    assert_eq!(init["result"]["capabilities"]["codeActionProvider"], true);
    lsp.notify("initialized", json!({}));
    lsp.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": teams, "languageId": "gantry", "version": 1, "text": typo}}),
    );
    let diags = lsp.diagnostics_for(&teams);
    assert_eq!(diags[0]["code"], "E0205", "{diags:?}");
    let range = json!({"start": {"line": 0, "character": 12}, "end": {"line": 0, "character": 12}});
    let actions = lsp.request(
        "textDocument/codeAction",
        json!({"textDocument": {"uri": teams}, "range": range, "context": {"diagnostics": diags}}),
    );
    let action = &actions["result"][0];
    assert_eq!(action["kind"], "quickfix", "{actions}");
    assert!(
        action["title"].as_str().unwrap().contains("guaranteed"),
        "{action}"
    );
    let edit = &action["edit"]["changes"][&teams][0];
    assert_eq!(edit["newText"], "guaranteed");
    assert_eq!(
        edit["range"],
        json!({"start": {"line": 0, "character": 10}, "end": {"line": 0, "character": 19}})
    );
    // Nowhere near a diagnostic: no actions.
    let elsewhere =
        json!({"start": {"line": 0, "character": 30}, "end": {"line": 0, "character": 31}});
    let none = lsp.request(
        "textDocument/codeAction",
        json!({"textDocument": {"uri": teams}, "range": elsewhere, "context": {"diagnostics": []}}),
    );
    assert_eq!(none["result"], json!([]), "{none}");
    let _ = std::fs::remove_dir_all(&dir);
}
