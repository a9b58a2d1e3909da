//! The LSP backend: open documents, one analysis per policy directory (re-run when one of
//! its documents changes, the newest edit winning), and the protocol handlers. Requests
//! for positions outside a document or for files it does not know get empty answers;
//! nothing a client sends can panic the server.

use super::analysis::Analysis;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tower_lsp::jsonrpc::Result;
use tower_lsp::lsp_types::{
    CodeAction, CodeActionKind, CodeActionOrCommand, CodeActionParams,
    CodeActionProviderCapability, CodeActionResponse, CompletionOptions, CompletionParams,
    CompletionResponse, DiagnosticRelatedInformation, DidChangeTextDocumentParams,
    DidCloseTextDocumentParams, DidOpenTextDocumentParams, DidSaveTextDocumentParams,
    DocumentFormattingParams, DocumentSymbolParams, DocumentSymbolResponse, GotoDefinitionParams,
    GotoDefinitionResponse, Hover, HoverParams, HoverProviderCapability, InitializeParams,
    InitializeResult, InitializedParams, Location, MessageType, OneOf, Range, ServerCapabilities,
    ServerInfo, TextDocumentSyncCapability, TextDocumentSyncKind, TextEdit, Url, WorkspaceEdit,
};
use tower_lsp::{Client, LanguageServer};

/// Documents larger than this are not checked live (they are still formatted on request).
const MAX_DOCUMENT: usize = 8 * 1024 * 1024;

/// One policy's latest analysis and the document texts it was made from.
struct Policy {
    analysis: Arc<Analysis>,
    made_from: BTreeMap<String, u64>,
    /// Files we published diagnostics for, to clear them when a file leaves.
    published: Vec<String>,
}

#[derive(Default)]
struct State {
    /// Open documents by file name (a path, or the URI for non-file documents).
    open: BTreeMap<String, String>,
    /// Each open document's version, so an edit handled late cannot undo a newer one.
    versions: BTreeMap<String, i32>,
    policies: BTreeMap<PathBuf, Policy>,
    /// Per policy directory, bumped on every edit; an analysis publishes only if no newer
    /// edit arrived while it ran.
    generation: BTreeMap<PathBuf, u64>,
    stdlib_dir: Option<PathBuf>,
}

pub struct Backend {
    client: Client,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend").finish_non_exhaustive()
    }
}

fn hash(text: &str) -> u64 {
    files::fnv1a(text.bytes())
}

/// The file name the server uses for a URI: the path for `file:` URIs, else the URI.
fn name_of(uri: &Url) -> String {
    uri.to_file_path()
        .map_or_else(|()| uri.to_string(), |p| p.display().to_string())
}

fn uri_of(name: &str) -> Option<Url> {
    Url::from_file_path(name)
        .ok()
        .or_else(|| Url::parse(name).ok())
}

/// The policy directory of a file (its parent; a non-file document stands alone).
fn dir_of(name: &str) -> PathBuf {
    let p = Path::new(name);
    if p.is_absolute() {
        p.parent()
            .map_or_else(|| PathBuf::from("/"), Path::to_path_buf)
    } else {
        PathBuf::from(name)
    }
}

/// The files of the policy in `dir`: its `.gantry` files on disk (not subdirectories),
/// with open documents' text over the disk's, in path order.
fn policy_files(dir: &Path, open: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_some_and(|x| x == "gantry") && path.is_file() {
                if let Ok(text) = std::fs::read_to_string(&path) {
                    files.insert(path.display().to_string(), text);
                }
            }
        }
    }
    for (name, text) in open {
        if dir_of(name) == dir {
            files.insert(name.clone(), text.clone());
        }
    }
    files.into_iter().collect()
}

impl Backend {
    pub fn new(client: Client) -> Backend {
        Backend {
            client,
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut guard = match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard)
    }

    /// Re-checks the policy `name` belongs to and publishes its diagnostics, unless a newer
    /// edit to the same policy arrived meanwhile.
    async fn refresh(&self, name: &str) {
        let dir = dir_of(name);
        let (generation, files, too_big) = self.with(|s| {
            let g = s.generation.entry(dir.clone()).or_insert(0);
            *g += 1;
            let too_big = s.open.get(name).is_some_and(|t| t.len() > MAX_DOCUMENT);
            (*g, policy_files(&dir, &s.open), too_big)
        });
        if too_big {
            self.client
                .log_message(
                    MessageType::WARNING,
                    format!("{name} is over {MAX_DOCUMENT} bytes; not checked while editing"),
                )
                .await;
            return;
        }
        let made_from = files.iter().map(|(n, t)| (n.clone(), hash(t))).collect();
        let Ok(analysis) = tokio::task::spawn_blocking(move || Analysis::new(&files)).await else {
            return;
        };
        let analysis = Arc::new(analysis);
        let (current, previously) = self.with(|s| {
            let current = s.generation.get(&dir) == Some(&generation);
            let previously = s
                .policies
                .get(&dir)
                .map(|p| p.published.clone())
                .unwrap_or_default();
            (current, previously)
        });
        if !current {
            return;
        }
        let diagnostics = analysis.diagnostics();
        let published: Vec<String> = diagnostics.keys().cloned().collect();
        for (file, list) in diagnostics {
            let Some(uri) = uri_of(&file) else { continue };
            let list = list
                .into_iter()
                .map(|d| {
                    let mut diagnostic = d.diagnostic;
                    let related: Vec<DiagnosticRelatedInformation> = d
                        .related
                        .into_iter()
                        .filter_map(|(place, message)| {
                            Some(DiagnosticRelatedInformation {
                                location: Location {
                                    uri: uri_of(&place.file)?,
                                    range: place.range,
                                },
                                message,
                            })
                        })
                        .collect();
                    if !related.is_empty() {
                        diagnostic.related_information = Some(related);
                    }
                    diagnostic
                })
                .collect();
            self.client.publish_diagnostics(uri, list, None).await;
        }
        for gone in previously.iter().filter(|f| !published.contains(f)) {
            if let Some(uri) = uri_of(gone) {
                self.client.publish_diagnostics(uri, Vec::new(), None).await;
            }
        }
        self.with(|s| {
            s.policies.insert(
                dir,
                Policy {
                    analysis,
                    made_from,
                    published,
                },
            );
        });
    }

    /// The analysis for the policy of `name`, re-made first if a document changed since.
    async fn analysis(&self, name: &str) -> Option<Arc<Analysis>> {
        let dir = dir_of(name);
        let fresh = self.with(|s| {
            let policy = s.policies.get(&dir)?;
            let stale = s
                .open
                .iter()
                .filter(|(n, _)| dir_of(n) == dir)
                .any(|(n, t)| policy.made_from.get(n) != Some(&hash(t)));
            (!stale).then(|| policy.analysis.clone())
        });
        if fresh.is_some() {
            return fresh;
        }
        self.refresh(name).await;
        self.with(|s| s.policies.get(&dir).map(|p| p.analysis.clone()))
    }

    /// Where stdlib modules are written so editors can open them: a cache folder.
    fn stdlib_path(&self, analysis: &Analysis, module_file: &str) -> Option<PathBuf> {
        let dir = self.with(|s| {
            s.stdlib_dir
                .get_or_insert_with(|| {
                    std::env::temp_dir()
                        .join(format!("gantry-stdlib-{}", env!("CARGO_PKG_VERSION")))
                })
                .clone()
        });
        let path = dir.join(module_file);
        if !path.exists() {
            let (_, text) = analysis
                .stdlib_files()
                .into_iter()
                .find(|(n, _)| n == module_file)?;
            std::fs::create_dir_all(path.parent()?).ok()?;
            std::fs::write(&path, text).ok()?;
        }
        Some(path)
    }
}

#[tower_lsp::async_trait]
impl LanguageServer for Backend {
    async fn initialize(&self, _: InitializeParams) -> Result<InitializeResult> {
        Ok(InitializeResult {
            server_info: Some(ServerInfo {
                name: "gantry".into(),
                version: Some(env!("CARGO_PKG_VERSION").into()),
            }),
            capabilities: ServerCapabilities {
                text_document_sync: Some(TextDocumentSyncCapability::Kind(
                    TextDocumentSyncKind::FULL,
                )),
                hover_provider: Some(HoverProviderCapability::Simple(true)),
                definition_provider: Some(OneOf::Left(true)),
                completion_provider: Some(CompletionOptions {
                    trigger_characters: Some(vec![".".into(), " ".into()]),
                    ..CompletionOptions::default()
                }),
                document_formatting_provider: Some(OneOf::Left(true)),
                document_symbol_provider: Some(OneOf::Left(true)),
                code_action_provider: Some(CodeActionProviderCapability::Simple(true)),
                ..ServerCapabilities::default()
            },
        })
    }

    async fn initialized(&self, _: InitializedParams) {
        self.client
            .log_message(MessageType::INFO, "gantry language server ready")
            .await;
    }

    async fn shutdown(&self) -> Result<()> {
        Ok(())
    }

    async fn did_open(&self, params: DidOpenTextDocumentParams) {
        let name = name_of(&params.text_document.uri);
        self.with(|s| {
            s.versions
                .insert(name.clone(), params.text_document.version);
            s.open.insert(name.clone(), params.text_document.text);
        });
        self.refresh(&name).await;
    }

    async fn did_change(&self, params: DidChangeTextDocumentParams) {
        let name = name_of(&params.text_document.uri);
        // Full sync: the last change holds the whole text.
        let Some(change) = params.content_changes.into_iter().last() else {
            return;
        };
        let version = params.text_document.version;
        let newer = self.with(|s| {
            if s.versions.get(&name).is_some_and(|v| *v > version) {
                return false;
            }
            s.versions.insert(name.clone(), version);
            s.open.insert(name.clone(), change.text);
            true
        });
        if newer {
            self.refresh(&name).await;
        }
    }

    async fn did_save(&self, params: DidSaveTextDocumentParams) {
        self.refresh(&name_of(&params.text_document.uri)).await;
    }

    async fn did_close(&self, params: DidCloseTextDocumentParams) {
        let name = name_of(&params.text_document.uri);
        self.with(|s| {
            s.open.remove(&name);
            s.versions.remove(&name);
        });
        // The file on disk (if any) is what the policy holds now.
        self.refresh(&name).await;
    }

    async fn hover(&self, params: HoverParams) -> Result<Option<Hover>> {
        let p = params.text_document_position_params;
        let name = name_of(&p.text_document.uri);
        Ok(self
            .analysis(&name)
            .await
            .and_then(|a| a.hover(&name, p.position)))
    }

    async fn goto_definition(
        &self,
        params: GotoDefinitionParams,
    ) -> Result<Option<GotoDefinitionResponse>> {
        let p = params.text_document_position_params;
        let name = name_of(&p.text_document.uri);
        let Some(analysis) = self.analysis(&name).await else {
            return Ok(None);
        };
        let Some(place) = analysis.definition(&name, p.position) else {
            return Ok(None);
        };
        let uri = if Path::new(&place.file).is_absolute() || place.file.contains(':') {
            uri_of(&place.file)
        } else {
            // A stdlib module: written to the cache folder so the editor can open it.
            self.stdlib_path(&analysis, &place.file)
                .and_then(|p| Url::from_file_path(p).ok())
        };
        Ok(uri.map(|uri| {
            GotoDefinitionResponse::Scalar(Location {
                uri,
                range: place.range,
            })
        }))
    }

    async fn completion(&self, params: CompletionParams) -> Result<Option<CompletionResponse>> {
        let p = params.text_document_position;
        let name = name_of(&p.text_document.uri);
        Ok(self
            .analysis(&name)
            .await
            .map(|a| CompletionResponse::Array(a.completion(&name, p.position))))
    }

    async fn formatting(&self, params: DocumentFormattingParams) -> Result<Option<Vec<TextEdit>>> {
        let name = name_of(&params.text_document.uri);
        let Some(text) = self.with(|s| s.open.get(&name).cloned()) else {
            return Ok(None);
        };
        // A file that does not parse is left as it is (its diagnostics say why).
        let Ok(formatted) = lang::format::format_source(&text) else {
            return Ok(None);
        };
        if formatted == text {
            return Ok(Some(Vec::new()));
        }
        let end = super::position::position(&text, text.len());
        Ok(Some(vec![TextEdit {
            range: Range {
                start: tower_lsp::lsp_types::Position::default(),
                end,
            },
            new_text: formatted,
        }]))
    }

    /// Quick fixes: the machine-applicable fix of each diagnostic at the range.
    async fn code_action(&self, params: CodeActionParams) -> Result<Option<CodeActionResponse>> {
        let name = name_of(&params.text_document.uri);
        let Some(analysis) = self.analysis(&name).await else {
            return Ok(None);
        };
        let actions = analysis
            .fixes(&name, params.range)
            .into_iter()
            .filter_map(|(title, place, replacement)| {
                let uri = uri_of(&place.file)?;
                let edit = TextEdit {
                    range: place.range,
                    new_text: replacement,
                };
                Some(CodeActionOrCommand::CodeAction(CodeAction {
                    title,
                    kind: Some(CodeActionKind::QUICKFIX),
                    edit: Some(WorkspaceEdit {
                        changes: Some([(uri, vec![edit])].into_iter().collect()),
                        ..WorkspaceEdit::default()
                    }),
                    is_preferred: Some(true),
                    ..CodeAction::default()
                }))
            })
            .collect();
        Ok(Some(actions))
    }

    async fn document_symbol(
        &self,
        params: DocumentSymbolParams,
    ) -> Result<Option<DocumentSymbolResponse>> {
        let name = name_of(&params.text_document.uri);
        Ok(self
            .analysis(&name)
            .await
            .map(|a| DocumentSymbolResponse::Nested(a.symbols(&name))))
    }
}
