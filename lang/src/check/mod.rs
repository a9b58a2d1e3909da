//! Checking: loads the policy's files and the standard-library modules they import, resolves
//! names, type-checks every definition, lowers them to the [`Program`] and runs the static
//! analyses. Checking never stops at the first error; it collects all it can.

mod analysis;
mod bindings;
mod blocks;
mod detach;
mod exprs;
pub mod index;
mod lints;
mod program;
pub mod types;

use crate::codes;
use crate::diagnostic::Diagnostic;
use crate::ir::Program;
use crate::source::{FileId, SourceMap, Span};
use crate::syntax::ast::{self, BlockKind, ItemKind, UseDecl};
use std::collections::BTreeMap;
use types::DefKind;

/// The result of checking one policy.
#[derive(Debug)]
pub struct Checked {
    pub sources: SourceMap,
    /// The parsed user files (not the stdlib modules), in the order given: editor checks
    /// only ([`check_for_editor`]). A plain check frees each part of the tree once it is
    /// lowered, so it hands back none.
    pub files: Vec<(FileId, ast::File)>,
    /// Present when no error was found (warnings allowed).
    pub program: Option<Program>,
    pub diagnostics: Vec<Diagnostic>,
    /// Definitions, names in scope and expression types, for editors: empty unless
    /// checked by [`check_for_editor`].
    pub index: index::Index,
}

impl Checked {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }
}

/// Checks one policy made of `files` (name, text), in the order given: rules from earlier
/// files run first. Standard-library modules are resolved from the embedded `stdlib`.
/// The editor index is left empty.
pub fn check(files: &[(String, String)]) -> Checked {
    check_with(files.to_vec(), false)
}

/// [`check`] of files the caller no longer needs: their texts move into the result's
/// [`SourceMap`] instead of being copied (a large policy is not held twice).
pub fn check_owned(files: Vec<(String, String)>) -> Checked {
    check_with(files, false)
}

/// [`check`], and the index editors query (definitions, scope, the type of every
/// expression): about a third more memory on a large policy, so only editors ask for it.
pub fn check_for_editor(files: &[(String, String)]) -> Checked {
    check_with(files.to_vec(), true)
}

fn check_with(files: Vec<(String, String)>, editor: bool) -> Checked {
    crate::suggest::reset_budget();
    let mut sources = SourceMap::new();
    let mut diagnostics = Vec::new();
    let mut parsed = Vec::new();
    for (name, text) in files {
        let id = sources.add(name, text);
        let text = sources.get(id).map_or("", |f| &*f.text);
        let (ast, diags) = crate::syntax::parse(id, text);
        diagnostics.extend(diags);
        parsed.push((id, ast));
    }
    let mut world = World::default();
    world.modules.push(Module {
        name: String::from("<policy>"),
        files: parsed.iter().map(|(id, _)| *id).collect(),
        ..Module::default()
    });
    // The policy's trees move into the map the checker reads (and, for an editor, back out
    // after): a 10 MB policy's tree is over a hundred MB, too much to hold twice.
    let order: Vec<FileId> = parsed.iter().map(|(id, _)| *id).collect();
    let mut asts: BTreeMap<FileId, ast::File> = parsed.into_iter().collect();
    load_imports(&mut world, &mut sources, &mut asts, 0, &mut diagnostics);
    let tree_lints = lints::tree_lints(&order, &asts);
    let detached = if editor {
        detach::Detached::default()
    } else {
        detach::Detached::take(&order, &mut asts)
    };
    let (program, index) = {
        let mut checker = Checker::new(&world, &asts);
        checker.editor = editor;
        checker.detached = detached;
        checker.tree_lints = tree_lints;
        checker.collect_definitions();
        checker.resolve_imports();
        let program = checker.lower();
        diagnostics.append(&mut checker.diags);
        let index = if editor {
            checker.index(0)
        } else {
            index::Index::default()
        };
        (program, index)
    };
    let parsed = if editor {
        order
            .into_iter()
            .filter_map(|id| asts.remove(&id).map(|ast| (id, ast)))
            .collect()
    } else {
        Vec::new()
    };
    sort_diagnostics(&mut diagnostics);
    let has_errors = diagnostics.iter().any(Diagnostic::is_error);
    Checked {
        sources,
        files: parsed,
        program: if has_errors { None } else { Some(program) },
        diagnostics,
        index,
    }
}

fn sort_diagnostics(diags: &mut Vec<Diagnostic>) {
    diags.sort_by_key(|d| {
        let s = d.primary_span().unwrap_or_default();
        (s.file, s.start, d.code)
    });
    diags.dedup();
}

pub use exprs::JOB_FIELDS;

pub(crate) type ModuleId = usize;

/// A set of files that share one namespace: the user's policy, or one stdlib module.
#[derive(Debug, Default)]
pub(crate) struct Module {
    pub name: String,
    pub files: Vec<FileId>,
    /// `use` declarations: the module imported and the names (None = all).
    pub imports: Vec<Import>,
}

#[derive(Debug, Clone)]
pub(crate) struct Import {
    pub module: ModuleId,
    pub names: Option<Vec<ast::Ident>>,
}

#[derive(Debug, Default)]
pub(crate) struct World {
    pub modules: Vec<Module>,
}

/// Loads, recursively, every `std.*` module a module imports.
fn load_imports(
    world: &mut World,
    sources: &mut SourceMap,
    asts: &mut BTreeMap<FileId, ast::File>,
    module: ModuleId,
    diags: &mut Vec<Diagnostic>,
) {
    let files = world
        .modules
        .get(module)
        .map(|m| m.files.clone())
        .unwrap_or_default();
    let uses: Vec<ast::UseDecl> = files
        .iter()
        .filter_map(|f| asts.get(f))
        .flat_map(|f| f.items.iter())
        .filter_map(|i| match &i.kind {
            ItemKind::Use(u) => Some(UseDecl::clone(u)),
            _ => None,
        })
        .collect();
    for u in uses {
        let path = u.module();
        let target = match world.modules.iter().position(|m| m.name == path) {
            Some(id) => Some(id),
            None => match stdlib::module(&path) {
                Some(text) => {
                    let file = sources.add(stdlib::file_name(&path), text);
                    let (ast, parse_diags) = crate::syntax::parse(file, text);
                    diags.extend(parse_diags);
                    asts.insert(file, ast);
                    world.modules.push(Module {
                        name: path.clone(),
                        files: vec![file],
                        imports: Vec::new(),
                    });
                    let id = world.modules.len() - 1;
                    load_imports(world, sources, asts, id, diags);
                    Some(id)
                }
                None => {
                    let d =
                        Diagnostic::new(codes::UNKNOWN_MODULE, format!("unknown module `{path}`"))
                            .with_label(u.path_span, "no such module")
                            .with_suggestion(&path, stdlib::MODULES.iter().map(|(n, _)| *n));
                    let d = if d.help.is_none() {
                        d.with_help(format!(
                            "standard-library modules are {}; files in the same directory need no `use`",
                            stdlib::MODULES.iter().map(|(n, _)| format!("`{n}`")).collect::<Vec<_>>().join(", ")
                        ))
                    } else {
                        d
                    };
                    diags.push(d);
                    None
                }
            },
        };
        if let (Some(target), Some(m)) = (target, world.modules.get_mut(module)) {
            m.imports.push(Import {
                module: target,
                names: u.names.clone(),
            });
        }
    }
}

/// One named definition.
#[derive(Debug, Clone)]
pub(crate) struct Def<'a> {
    pub kind: DefKind,
    /// Borrowed from the tree, as are the scopes' keys: a large policy has a name per rule.
    pub name: &'a str,
    pub span: Span,
    pub module: ModuleId,
    pub block: Option<&'a ast::Block>,
    pub rule: Option<&'a ast::RuleDecl>,
    /// For teams declared inside a cohort block.
    pub cohort: Option<&'a str>,
}

pub(crate) type DefId = usize;

/// The `team` blocks of a cohort item, each a definition of its own.
fn cohort_teams(item: &ast::Item) -> usize {
    let ItemKind::Block(b) = &item.kind else {
        return 0;
    };
    if b.kind != BlockKind::Cohort {
        return 0;
    }
    b.body
        .iter()
        .filter(|s| matches!(&s.kind, ast::StmtKind::Block(t) if t.kind == BlockKind::Team))
        .count()
}

pub(crate) struct Checker<'a> {
    pub world: &'a World,
    pub asts: &'a BTreeMap<FileId, ast::File>,
    pub defs: Vec<Def<'a>>,
    /// Per module: its own definitions by name.
    pub local: Vec<BTreeMap<&'a str, DefId>>,
    /// Per module: the imported names visible in it, those its own definitions do not
    /// shadow. What a module sees is `local` and then this (see [`Checker::visible_id`]);
    /// a policy of many rules imports little, so its names are not held twice.
    pub scope: Vec<BTreeMap<&'a str, DefId>>,
    /// Unnamed blocks (placement, autoscale) per module.
    pub unnamed: Vec<Vec<&'a ast::Block>>,
    pub diags: Vec<Diagnostic>,
    /// Spans of lowered values the static analyses point at, keyed `kind/name/field`.
    pub spans: BTreeMap<String, Span>,
    /// Whether the editor index is wanted (`typed` is collected only then).
    pub editor: bool,
    /// Every expression typed, with its type described, for editors.
    pub typed: Vec<(Span, std::sync::Arc<str>)>,
    /// The descriptions in `typed`, each allocated once.
    pub type_names: std::collections::HashMap<String, std::sync::Arc<str>>,
    /// [`Checker::visible_names`] per module and kind, listed once: a policy with many
    /// definitions and many unknown names would otherwise list every name per error.
    visible: std::cell::RefCell<VisibleNames<'a>>,
    /// Teams whose guarantee did not lower (an error reported there): lowered as 0, so
    /// the analyses that read it stay quiet rather than repeat that error.
    pub unlowered_guarantees: std::collections::BTreeSet<String>,
    /// The parts of the policy's tree a plain check frees as it lowers them.
    pub detached: detach::Detached,
    /// The lints read from the policy's tree, worked out before lowering.
    pub tree_lints: Vec<Diagnostic>,
}

type VisibleNames<'a> =
    std::collections::HashMap<(ModuleId, Option<DefKind>), std::rc::Rc<[&'a str]>>;

impl<'a> Checker<'a> {
    /// Whether `name` is defined in text that did not parse (reported there already).
    pub(crate) fn broken(&self, name: &str) -> bool {
        self.asts
            .values()
            .any(|f| f.broken.iter().any(|b| b == name))
    }

    fn new(world: &'a World, asts: &'a BTreeMap<FileId, ast::File>) -> Checker<'a> {
        let n = world.modules.len();
        Checker {
            world,
            asts,
            defs: Vec::new(),
            local: vec![BTreeMap::new(); n],
            scope: vec![BTreeMap::new(); n],
            unnamed: vec![Vec::new(); n],
            diags: Vec::new(),
            spans: BTreeMap::new(),
            editor: false,
            typed: Vec::new(),
            type_names: std::collections::HashMap::new(),
            visible: std::cell::RefCell::default(),
            unlowered_guarantees: std::collections::BTreeSet::new(),
            detached: detach::Detached::default(),
            tree_lints: Vec::new(),
        }
    }

    fn module_items(&self, module: ModuleId) -> Vec<&'a ast::Item> {
        let asts = self.asts;
        self.world
            .modules
            .get(module)
            .map(|m| {
                m.files
                    .iter()
                    .filter_map(|f| asts.get(f))
                    .flat_map(|f| f.items.iter())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn collect_definitions(&mut self) {
        // Every loaded file's items, and the teams inside cohorts: at most one definition
        // each, so the list is sized once rather than doubled past its needs.
        self.defs.reserve_exact(
            self.asts
                .values()
                .flat_map(|f| &f.items)
                .map(|item| 1 + cohort_teams(item))
                .sum(),
        );
        for module in 0..self.world.modules.len() {
            for item in self.module_items(module) {
                match &item.kind {
                    ItemKind::Use(_) => {}
                    ItemKind::Rule(r) => {
                        self.define(Def {
                            kind: DefKind::Rule,
                            name: &r.name.name,
                            span: r.name.span,
                            module,
                            block: None,
                            rule: Some(r),
                            cohort: None,
                        });
                    }
                    ItemKind::Block(b) => self.collect_block(module, b, None),
                }
            }
        }
    }

    fn collect_block(&mut self, module: ModuleId, b: &'a ast::Block, cohort: Option<&'a str>) {
        let kind = match b.kind {
            BlockKind::Pool => DefKind::Pool,
            BlockKind::Tier => DefKind::Tier,
            BlockKind::Cohort => DefKind::Cohort,
            BlockKind::Team => DefKind::Team,
            BlockKind::Gpu => DefKind::Gpu,
            BlockKind::Node => DefKind::Node,
            BlockKind::Warm => DefKind::Warm,
            BlockKind::Placement | BlockKind::Autoscale if !b.template => {
                if let Some(u) = self.unnamed.get_mut(module) {
                    u.push(b);
                }
                return;
            }
            BlockKind::Placement => DefKind::Placement,
            BlockKind::Autoscale => DefKind::Autoscale,
            BlockKind::Mig => {
                self.diags.push(
                    Diagnostic::new(
                        codes::MISPLACED_BLOCK,
                        "`mig` profiles belong inside a `gpu` block",
                    )
                    .with_label(b.kind_span, "not inside a `gpu` block")
                    .with_help("move this block into the `gpu` definition it describes"),
                );
                return;
            }
        };
        let Some(name) = &b.name else {
            self.diags.push(
                Diagnostic::new(
                    codes::SYNTAX,
                    format!("this `{}` block needs a name", b.kind.keyword()),
                )
                .with_label(b.kind_span, "name missing")
                .with_help(format!("write `{} NAME {{ ... }}`", b.kind.keyword())),
            );
            return;
        };
        self.define(Def {
            kind,
            name: &name.name,
            span: name.span,
            module,
            block: Some(b),
            rule: None,
            cohort,
        });
        if kind == DefKind::Cohort {
            for s in &b.body {
                if let ast::StmtKind::Block(inner) = &s.kind {
                    if inner.kind == BlockKind::Team {
                        self.collect_block(module, inner, Some(&name.name));
                    }
                }
            }
        }
    }

    fn define(&mut self, def: Def<'a>) {
        let id = self.defs.len();
        let module = def.module;
        let Some(local) = self.local.get_mut(module) else {
            return;
        };
        if let Some(&prev) = local.get(&def.name) {
            if let Some(p) = self.defs.get(prev) {
                self.diags.push(
                    Diagnostic::new(
                        codes::DUPLICATE,
                        format!("`{}` is defined more than once", def.name),
                    )
                    .with_label(
                        def.span,
                        format!("{} `{}` defined again here", def.kind.noun(), def.name),
                    )
                    .with_label(p.span, format!("first defined here as a {}", p.kind.noun()))
                    .with_help("rename one of the definitions; names are shared by all kinds"),
                );
            }
            return;
        }
        local.insert(def.name, id);
        self.defs.push(def);
    }

    /// Fills each module's scope: own definitions, then imports. A whole-module import brings
    /// the module's scope, its own imports included, so templates can re-export; own names
    /// win over whole-module imports; a name imported explicitly must not clash.
    fn resolve_imports(&mut self) {
        self.visible.get_mut().clear();
        let n = self.world.modules.len();
        // Imports may point either way in load order: iterate to a fixed point (at most one
        // pass per module), then report import problems once, against the final scopes.
        for _ in 0..=n {
            let mut changed = false;
            for module in 0..n {
                let scope = self.module_scope(module, false);
                if let Some(s) = self.scope.get_mut(module).filter(|s| **s != scope) {
                    *s = scope;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        for module in 0..n {
            self.module_scope(module, true);
        }
    }

    fn module_scope(&mut self, module: ModuleId, report: bool) -> BTreeMap<&'a str, DefId> {
        let mut scope = BTreeMap::new();
        let world = self.world;
        let imports = world
            .modules
            .get(module)
            .map(|m| m.imports.as_slice())
            .unwrap_or_default();
        for import in imports {
            let mut theirs = self.local.get(import.module).cloned().unwrap_or_default();
            if let Some(s) = self.scope.get(import.module) {
                for (k, v) in s {
                    theirs.entry(*k).or_insert(*v);
                }
            }
            let module_name = self
                .world
                .modules
                .get(import.module)
                .map_or("", |m| m.name.as_str())
                .to_string();
            let Some(names) = &import.names else {
                let own = self.local.get(module);
                for (name, id) in theirs {
                    if !own.is_some_and(|l| l.contains_key(name)) {
                        scope.entry(name).or_insert(id);
                    }
                }
                continue;
            };
            for n in names {
                match theirs.get(n.name.as_str()) {
                    Some(&id) => {
                        if let Some(&existing) =
                            self.local.get(module).and_then(|l| l.get(n.name.as_str()))
                        {
                            if report {
                                let prev =
                                    self.defs.get(existing).map(|d| d.span).unwrap_or(n.span);
                                self.diags.push(
                                    Diagnostic::new(
                                        codes::DUPLICATE,
                                        format!("`{}` is imported and also defined here", n.name),
                                    )
                                    .with_label(n.span, "imported here")
                                    .with_label(prev, "defined here")
                                    .with_help("rename the local definition or drop the import"),
                                );
                            }
                        } else {
                            scope.insert(n.name.as_str(), id);
                        }
                    }
                    None if report => self.diags.push(
                        Diagnostic::new(
                            codes::UNKNOWN_NAME,
                            format!("module `{module_name}` has no definition `{}`", n.name),
                        )
                        .with_label(n.span, "not in that module")
                        .with_suggestion(&n.name, theirs.keys().copied()),
                    ),
                    None => {}
                }
            }
        }
        scope
    }

    pub fn lookup(&self, module: ModuleId, name: &str) -> Option<&Def<'a>> {
        self.defs.get(self.visible_id(module, name)?)
    }

    /// The definition `name` means in `module`: its own, else an imported one.
    pub fn visible_id(&self, module: ModuleId, name: &str) -> Option<DefId> {
        let own = self.local.get(module).and_then(|l| l.get(name));
        own.or_else(|| self.scope.get(module).and_then(|s| s.get(name)))
            .copied()
    }

    /// Every name visible in `module` with its definition: own ones, then imported ones.
    pub fn visible_entries(&self, module: ModuleId) -> impl Iterator<Item = (&'a str, DefId)> + '_ {
        let own = self.local.get(module).into_iter().flatten();
        let imported = self.scope.get(module).into_iter().flatten();
        own.chain(imported).map(|(n, id)| (*n, *id))
    }

    /// Names visible in a module, for did-you-mean; none once this check's suggestion
    /// budget is spent (listing them would cost as much as comparing them).
    pub fn visible_names(&self, module: ModuleId, kind: Option<DefKind>) -> std::rc::Rc<[&'a str]> {
        if !crate::suggest::budget_left() {
            return std::rc::Rc::from([]);
        }
        if let Some(listed) = self.visible.borrow().get(&(module, kind)) {
            return std::rc::Rc::clone(listed);
        }
        let listed: std::rc::Rc<[&'a str]> = self
            .visible_entries(module)
            .filter(|(_, id)| kind.is_none() || self.defs.get(*id).map(|d| d.kind) == kind)
            .map(|(n, _)| n)
            .collect();
        self.visible
            .borrow_mut()
            .insert((module, kind), std::rc::Rc::clone(&listed));
        listed
    }

    pub fn error(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }
}

#[cfg(test)]
mod tests {
    use super::{check, check_for_editor, check_owned};

    #[test]
    fn only_the_editor_check_builds_the_index_and_all_three_agree() {
        let files = vec![(
            "p.gantry".to_string(),
            "use std.tiers\n\ntier critical { priority = 1 }\n\nrule r1: warn if job.gpus > 8 gpu and job.tier == standard \"big\"\n".to_string(),
        )];
        let plain = check(&files);
        let owned = check_owned(files.clone());
        let editor = check_for_editor(&files);
        assert!(plain.program.is_some(), "{:?}", plain.diagnostics);
        assert!(plain.index.definitions.is_empty() && plain.index.types.is_empty());
        assert!(owned.index.types.is_empty());
        assert!(!editor.index.types.is_empty());
        // Own names win over a whole-module import's; imported ones are still visible.
        let own = editor.index.resolve("critical").map(|d| d.module.as_str());
        assert_eq!(own, Some("<policy>"));
        let imported = editor.index.resolve("standard").map(|d| d.module.as_str());
        assert_eq!(imported, Some("std.tiers"));
        assert!(editor.index.resolve("r1").is_some());
        assert_eq!(plain.program, editor.program);
        assert_eq!(plain.program, owned.program);
        assert_eq!(plain.diagnostics, editor.diagnostics);
        assert_eq!(plain.diagnostics, owned.diagnostics);
        assert_eq!(plain.files, owned.files);
    }
}
