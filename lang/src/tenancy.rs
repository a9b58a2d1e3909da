//! Who may submit as a team: a team's `namespaces`, `users` and `groups` bind it to the
//! requests that may name it, the way Kueue binds a namespace's LocalQueue to a
//! ClusterQueue and Slurm binds users to accounts. A pattern is a name with `*` standing
//! for any run of characters (`ml-*`, `system:serviceaccount:ci:*`).
//!
//! A team with none of the three is *open*: any request may name it. A bound team admits
//! a request when its namespace matches one of `namespaces` (if given) and its user or one
//! of its groups matches one of `users` or `groups` (if either is given). Service accounts
//! are users (`system:serviceaccount:NS:NAME`) in groups (`system:serviceaccounts:NS`), as
//! the API server names them.

use crate::ir::Team;

/// The identity an admission request carries (the API server's `userInfo`) and where.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Submitter<'a> {
    pub namespace: &'a str,
    pub user: &'a str,
    pub groups: &'a [String],
}

impl Team {
    /// Whether any of `namespaces`, `users` or `groups` is given.
    pub fn is_bound(&self) -> bool {
        self.namespaces.is_some() || self.users.is_some() || self.groups.is_some()
    }

    /// Whether a pod in `namespace` may be this team's, whoever created it: for pods a
    /// workload controller creates on someone's behalf, judged by namespace alone.
    pub fn admits_namespace(&self, namespace: &str) -> bool {
        self.namespaces
            .as_ref()
            .is_none_or(|ns| ns.iter().any(|p| glob(p, namespace)))
    }

    /// Whether `who` may submit as this team (see the module documentation).
    pub fn admits(&self, who: &Submitter<'_>) -> bool {
        if !self.admits_namespace(who.namespace) {
            return false;
        }
        if self.users.is_none() && self.groups.is_none() {
            return true;
        }
        let user = self.users.iter().flatten().any(|p| glob(p, who.user));
        let group = self
            .groups
            .iter()
            .flatten()
            .any(|p| who.groups.iter().any(|g| glob(p, g)));
        user || group
    }
}

/// Whether `pattern` (`*` for any run of characters) matches all of `text`. Linear in
/// the two lengths times the number of `*`s at worst; patterns are short.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut i, mut j) = (0, 0);
    // Where the last `*` was, and the text position it was tried from.
    let mut star: Option<(usize, usize)> = None;
    while j < t.len() {
        match p.get(i) {
            Some(b'*') => {
                star = Some((i, j));
                i += 1;
            }
            Some(c) if Some(c) == t.get(j) => {
                i += 1;
                j += 1;
            }
            _ => match star {
                Some((si, sj)) => {
                    i = si + 1;
                    j = sj + 1;
                    star = Some((si, sj + 1));
                }
                None => return false,
            },
        }
    }
    p.get(i..)
        .is_some_and(|rest| rest.iter().all(|c| *c == b'*'))
}

/// Whether some name matches both patterns.
pub fn overlap(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    // Reachable (i, j) states, each visited once: patterns are at most a few hundred
    // bytes (the checker refuses longer ones).
    let mut seen = vec![false; (a.len() + 1) * (b.len() + 1)];
    let mut todo = vec![(0usize, 0usize)];
    while let Some((i, j)) = todo.pop() {
        let at = i * (b.len() + 1) + j;
        match seen.get_mut(at) {
            Some(s) if !*s => *s = true,
            _ => continue,
        }
        match (a.get(i), b.get(j)) {
            (None, None) => return true,
            (Some(b'*'), _) | (_, Some(b'*')) => {
                if a.get(i) == Some(&b'*') {
                    todo.push((i + 1, j));
                    if j < b.len() {
                        todo.push((i, j + 1));
                    }
                }
                if b.get(j) == Some(&b'*') {
                    todo.push((i, j + 1));
                    if i < a.len() {
                        todo.push((i + 1, j));
                    }
                }
            }
            (Some(x), Some(y)) if x == y => todo.push((i + 1, j + 1)),
            _ => {}
        }
    }
    false
}

/// Whether two optional pattern lists can both match one name (`None` matches any).
pub fn lists_overlap(a: Option<&[String]>, b: Option<&[String]>) -> bool {
    match (a, b) {
        (None, _) | (_, None) => true,
        (Some(a), Some(b)) => a.iter().any(|x| b.iter().any(|y| overlap(x, y))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_names() {
        assert!(glob("ml-*", "ml-vision"));
        assert!(glob("ml-*", "ml-"));
        assert!(!glob("ml-*", "xml-vision"));
        assert!(glob("*", ""));
        assert!(glob("a*b*c", "aXXbYYc"));
        assert!(!glob("a*b*c", "aXXbYY"));
        assert!(glob(
            "system:serviceaccount:ci:*",
            "system:serviceaccount:ci:runner"
        ));
        assert!(!glob("prod", "production"));
        assert!(glob("*-prod", "team-a-prod"));
    }

    #[test]
    fn overlap_is_a_shared_name() {
        assert!(overlap("ml-*", "ml-vision"));
        assert!(overlap("ml-*", "*-vision"));
        assert!(overlap("*", "anything"));
        assert!(!overlap("ml-*", "prod-*"));
        assert!(!overlap("a", "b"));
        assert!(overlap("a*", "*b"));
        assert!(!overlap("a*x", "b*"));
        assert!(overlap("vision", "vision"));
    }

    fn team(ns: Option<&[&str]>, users: Option<&[&str]>, groups: Option<&[&str]>) -> Team {
        let list = |l: Option<&[&str]>| l.map(|l| l.iter().map(|s| s.to_string()).collect());
        Team {
            name: "t".into(),
            cohort: None,
            guaranteed: crate::ir::Quota::default(),
            burst: None,
            lend: None,
            tiers: None,
            weight: 1.0,
            default: false,
            default_runtime_s: None,
            namespaces: list(ns),
            users: list(users),
            groups: list(groups),
        }
    }

    #[test]
    fn a_bound_team_admits_its_namespaces_and_identities() {
        let groups = vec!["vision-devs".to_string()];
        let alice = Submitter {
            namespace: "ml-vision",
            user: "alice",
            groups: &groups,
        };
        assert!(team(None, None, None).admits(&alice));
        assert!(!team(None, None, None).is_bound());
        assert!(team(Some(&["ml-*"]), None, None).admits(&alice));
        assert!(!team(Some(&["prod"]), None, None).admits(&alice));
        assert!(team(Some(&["ml-*"]), Some(&["bob"]), Some(&["vision-*"])).admits(&alice));
        assert!(!team(Some(&["ml-*"]), Some(&["bob"]), None).admits(&alice));
        assert!(!team(Some(&[]), None, None).admits(&alice));
        assert!(team(None, Some(&["alice"]), None).admits(&alice));
    }
}
