//! The PriorityClasses `/mutate` gives pods (`gantry-<tier>`, `_` as `-`): a tier whose
//! class does not exist makes the API server refuse every pod of that tier at creation,
//! and one whose value is not the tier's priority makes kube-scheduler order and preempt
//! pods other than the policy says. Checked by the queue's controller for each policy
//! revision it runs (a `get` per tier, `scheduling.k8s.io/v1`); what is wrong is logged
//! and shown in `/v1/status`'s notes.

use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::{Api, Client};
use lang::ir::Program;
use std::collections::BTreeMap;

/// The class `/mutate` gives pods of `tier`.
pub fn class_name(tier: &str) -> String {
    format!("gantry-{}", tier.replace('_', "-"))
}

/// What the API server said of one class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Value(i32),
    Missing,
    /// It could not be read (RBAC, an outage): why.
    Unread(String),
}

/// What is wrong with the classes `found` (by class name) for `program`'s tiers.
pub fn problems(program: &Program, found: &BTreeMap<String, Found>) -> Vec<String> {
    let mut out = Vec::new();
    for tier in &program.tiers {
        let class = class_name(&tier.name);
        match found.get(&class) {
            Some(Found::Missing) => out.push(format!(
                "tier `{}`: PriorityClass `{class}` does not exist, so the API server refuses every pod of the tier that gantry admits; create it with value {} (examples/kubernetes/deployment.yaml, or the chart's priorityClasses.tiers)",
                tier.name, tier.priority
            )),
            Some(Found::Value(v)) if i64::from(*v) != tier.priority => out.push(format!(
                "tier `{}`: PriorityClass `{class}` has value {v}, the tier's priority is {}: kube-scheduler orders and preempts by the class; make them equal",
                tier.name, tier.priority
            )),
            Some(Found::Unread(why)) => out.push(format!(
                "tier `{}`: PriorityClass `{class}` could not be read ({why}); not checked",
                tier.name
            )),
            Some(Found::Value(_)) | None => {}
        }
    }
    out
}

/// Reads each tier's class and says what is wrong.
pub async fn check(client: &Client, program: &Program) -> Vec<String> {
    let api: Api<PriorityClass> = Api::all(client.clone());
    let mut found = BTreeMap::new();
    for tier in &program.tiers {
        let class = class_name(&tier.name);
        let seen = match api.get_opt(&class).await {
            Ok(Some(pc)) => Found::Value(pc.value),
            Ok(None) => Found::Missing,
            Err(e) => Found::Unread(crate::bounded::brief(&e)),
        };
        found.insert(class, seen);
    }
    problems(program, &found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_different_class_is_named_with_its_fix() {
        let dir = tempfile::tempdir();
        assert!(dir.is_ok());
        let Ok(dir) = dir else { return };
        let text = "use std.nodes.{dgx_h100}\nuse std.tiers\npool p { capacity = reserved; node = dgx_h100; nodes = 1 }\n";
        assert!(std::fs::write(dir.path().join("policy.gantry"), text).is_ok());
        let policy = serve::state::load_policy(dir.path(), 0);
        assert!(policy.is_ok(), "{:?}", policy.as_ref().err());
        let Ok(policy) = policy else { return };
        let program = &policy.program;
        let tiers: Vec<&str> = program.tiers.iter().map(|t| t.name.as_str()).collect();
        assert!(tiers.contains(&"best_effort"), "{tiers:?}");
        let mut found: BTreeMap<String, Found> = program
            .tiers
            .iter()
            .map(|t| (class_name(&t.name), Found::Value(t.priority as i32)))
            .collect();
        assert!(problems(program, &found).is_empty());
        found.insert("gantry-best-effort".into(), Found::Missing);
        found.insert("gantry-critical".into(), Found::Value(7));
        let said = problems(program, &found);
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(said
            .iter()
            .any(|s| s.contains("`gantry-best-effort` does not exist")));
        assert!(said.iter().any(|s| s.contains("has value 7")));
    }
}
