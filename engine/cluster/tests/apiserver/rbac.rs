//! RBAC as the API server's authorizer sees it: the rules of a manifest, and the rule a
//! request needs, so tests can check the example manifests cover every request made.

use std::collections::BTreeSet;
use std::path::Path;

/// (API group, resource with subresource, verb).
pub type Rule = (String, String, String);

/// The rules of every ClusterRole and Role in a manifest written the way ours are (one
/// flow list per `apiGroups:`, `resources:` and `verbs:` line).
pub fn rules(yaml: &str) -> BTreeSet<Rule> {
    let list = |line: &str| -> Vec<String> {
        let inside = line
            .split_once('[')
            .and_then(|(_, r)| r.rsplit_once(']'))
            .map_or("", |(l, _)| l);
        inside
            .split(',')
            .map(|s| s.trim().trim_matches('"').to_string())
            .collect()
    };
    let mut out = BTreeSet::new();
    let (mut groups, mut resources) = (Vec::new(), Vec::new());
    for line in yaml.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("- apiGroups:") {
            groups = list(rest);
        } else if let Some(rest) = line.strip_prefix("resources:") {
            resources = list(rest);
        } else if let Some(rest) = line.strip_prefix("verbs:") {
            for g in &groups {
                for r in &resources {
                    for v in list(rest) {
                        out.insert((g.clone(), r.clone(), v));
                    }
                }
            }
        }
    }
    out
}

/// The RBAC rule a request needs, as the API server's authorizer reads its path.
pub fn needs(method: &str, path: &str, watch: bool) -> Rule {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.first() {
        Some(&"api") => (String::new(), parts.get(2..).unwrap_or_default()),
        _ => (
            parts.get(1).copied().unwrap_or_default().to_string(),
            parts.get(3..).unwrap_or_default(),
        ),
    };
    let rest = if rest.first() == Some(&"namespaces") && rest.len() > 2 {
        &rest[2..]
    } else {
        rest
    };
    let resource = match rest {
        [r, _, sub] => format!("{r}/{sub}"),
        [r, ..] => (*r).to_string(),
        [] => String::new(),
    };
    let verb = match (method, rest.len() > 1, watch) {
        ("GET", false, true) => "watch",
        ("GET", false, false) => "list",
        ("GET", true, _) => "get",
        ("POST", ..) => "create",
        ("PATCH", ..) => "patch",
        ("PUT", ..) => "update",
        ("DELETE", ..) => "delete",
        _ => "unknown",
    };
    (group, resource, verb.to_string())
}

/// The rules of `files` in `examples/kubernetes/`.
pub fn example_rules(files: &[&str]) -> BTreeSet<Rule> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/kubernetes");
    files
        .iter()
        .flat_map(|f| rules(&std::fs::read_to_string(dir.join(f)).unwrap_or_default()))
        .collect()
}

/// The requests `api` served that `allowed` does not cover. Discovery (`GET /apis/GROUP`)
/// names no resource: every authenticated user may read it (`system:discovery`).
pub fn not_allowed(api: &super::FakeApi, allowed: &BTreeSet<Rule>) -> Vec<Rule> {
    let needed: BTreeSet<Rule> = api
        .requests()
        .iter()
        .map(|(m, p, w)| needs(m, p, *w))
        .filter(|(_, resource, _)| !resource.is_empty())
        .collect();
    needed.difference(allowed).cloned().collect()
}
