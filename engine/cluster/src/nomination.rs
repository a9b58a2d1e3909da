//! A preemptor's choice, kept until it is carried out: kube-scheduler's nominated node,
//! for gangs and quotas.
//!
//! When a cycle evicts victims for job J, J's pods are marked first with the node chosen
//! for each (`gantry.dev/nominated-node: <node> until <time>`, sealed like an assignment).
//! While the nomination stands, the view shows J as running where it was nominated and
//! leaves out its victims (their GPUs are J's): so no cycle picks a second victim set for
//! J, places J elsewhere, or gives the GPUs freed for J to anyone else, and the victims'
//! team is no longer charged for pods that are going. Once the victims are gone J is
//! released there (`enact`); the release clears the nomination.
//!
//! A nomination is given up — J queues again, and decides afresh — when it expires (the
//! victims' grace and [`SLACK_S`] past the eviction: a PodDisruptionBudget may refuse the
//! eviction for good), when J no longer fits its nodes (a GPU failed there, the node is
//! gone, closed or interrupted), or when a higher-priority job preempts J (its pods are
//! unbound: the nomination is withdrawn rather than the pods evicted).
//!
//! Pods stopping for no standing nomination hold their GPUs until they are gone, as
//! running jobs no team is charged for and no cycle picks as victims again; a standing
//! nomination on their node that needs their room (it took over a withdrawn one's) has it
//! once they are gone (`take_over_stopping`).

use crate::pods::PodSeen;
use crate::queue::{QueueView, FOREIGN};
use crate::seal::Seal;
use engine::inventory::jobs_file::{Job, PlacedMember};
use std::collections::{BTreeMap, BTreeSet};

/// How long past the victims' grace a nomination waits for them to be gone.
pub const SLACK_S: i64 = 120;

/// A standing nomination, as the view keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct Nomination {
    /// Each member's node, in member order.
    pub nodes: Vec<String>,
    pub until: i64,
    /// The victims' pods still present, stopping or refused.
    pub victims: Vec<Victim>,
    /// The job as it waits, and its victims' jobs taken out of the view: put back when
    /// the nomination is given up.
    pub waiting: Job,
    pub taken_out: Vec<Job>,
}

/// A victim's pod still present: evicted again each cycle while the API server refuses.
#[derive(Debug, Clone, PartialEq)]
pub struct Victim {
    pub pod: String,
    pub job: String,
    pub cause: String,
    /// Its tier's grace (30 s when its tier is not known).
    pub grace_s: u64,
    pub stopping: bool,
}

/// The grace of a pod whose tier the policy does not name, as Kubernetes' default.
const DEFAULT_GRACE_S: u64 = 30;

/// The annotation's text for `node` held until `until`.
pub fn text(node: &str, until: i64) -> String {
    let at = chrono::DateTime::from_timestamp(until, 0)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default();
    format!("{node} until {at}")
}

/// The node and the time of an annotation's text.
pub fn read(text: &str) -> Option<(&str, i64)> {
    let (node, at) = text.split_once(" until ")?;
    let at = chrono::DateTime::parse_from_rfc3339(at.trim()).ok()?;
    Some((node.trim(), at.timestamp())).filter(|(n, _)| !n.is_empty())
}

/// The seal of nominating the pod `uid` as `text` says. Distinct from an assignment's
/// seal: node names hold no `:`.
pub fn sign(seal: &Seal, uid: &str, text: &str) -> String {
    seal.sign_mark("nominated", uid, text)
}

/// The node held for `p` and until when, when its nomination is gantry's and has not
/// expired.
pub fn held<'a>(p: &'a PodSeen, seal: Option<&Seal>, now: i64) -> Option<(&'a str, i64)> {
    let (text, mark) = p.nominated.as_ref()?;
    let ok = seal?.verify_mark("nominated", &p.uid, text, mark);
    let (node, until) = read(text)?;
    (ok && until > now).then_some((node, until))
}

/// Applies the nominations standing at `now` to `out` (see the module docs), then turns
/// the remaining stopping jobs into holders no one is charged for. One pass over the jobs
/// however many nominations stand.
pub(crate) fn apply(
    out: &mut QueueView,
    pods: &BTreeMap<String, PodSeen>,
    seal: Option<&Seal>,
    program: Option<&lang::ir::Program>,
    now: i64,
) {
    let standing = standing(out, pods, seal, now);
    if standing.is_empty() {
        stopping_holders(out, pods);
        return;
    }
    // Each standing nomination's victims' pods, still present.
    let mut victim_of: BTreeMap<String, &str> = BTreeMap::new();
    for p in pods.values() {
        if let Some((id, _)) = p
            .preempted_for(seal)
            .and_then(|j| standing.get_key_value(j))
        {
            victim_of.insert(p.key(), id.as_str());
        }
    }
    let grace = |tier: Option<&str>| {
        tier.and_then(|t| program?.tiers.iter().find(|x| x.name == t))
            .map_or(DEFAULT_GRACE_S, |t| t.grace_s)
    };
    let mut found: BTreeMap<&str, Found> = BTreeMap::new();
    let mut kept = Vec::with_capacity(out.jobs.len());
    for mut j in std::mem::take(&mut out.jobs) {
        if let Some((id, (nodes, until))) = standing.get_key_value(&j.id) {
            found.entry(id.as_str()).or_default().2 = Some(j.clone());
            j.placement = nodes
                .iter()
                .map(|n| PlacedMember {
                    node: n.clone(),
                    gpus: Vec::new(),
                    gpu_milli: None,
                    mig_starts: Vec::new(),
                })
                .collect();
            // Shown running from now (what protects it, and what it would lose, count from
            // now), it starts once its victims are gone, by their grace, which the
            // nomination's expiry is past by SLACK_S: it is expected to end that much
            // later (as the replay starts a preemptor).
            j.started_at = Some(now);
            let wait = until.saturating_sub(SLACK_S).saturating_sub(now).max(0);
            j.runtime_s = j
                .runtime_s
                .map(|r| r.saturating_add(u64::try_from(wait).unwrap_or(0)));
            kept.push(j);
            continue;
        }
        let keys = out.members.get(&j.id).map_or(&[][..], Vec::as_slice);
        let Some(&id) = keys
            .iter()
            .find_map(|k| victim_of.get(k))
            .filter(|_| !j.placement.is_empty())
        else {
            kept.push(j);
            continue;
        };
        let entry = found.entry(id).or_default();
        for k in keys.iter().filter(|k| victim_of.contains_key(*k)) {
            let Some(p) = pods.get(k) else { continue };
            entry.0.push(Victim {
                pod: k.clone(),
                job: j.id.clone(),
                cause: p
                    .sealed_mark(seal)
                    .and_then(|m| m.rsplit_once(": for "))
                    .map_or_else(String::new, |(c, _)| c.to_string()),
                grace_s: grace(j.tier.as_deref()),
                stopping: p.terminating,
            });
        }
        // Its members on the nominated nodes: their GPUs are the preemptor's now. Those
        // elsewhere keep what they hold, charged to no team, until they are gone (or
        // another nomination there needs them: `take_over_stopping`).
        let (on, until) = standing
            .get(id)
            .map_or((&[][..], now), |(n, u)| (n.as_slice(), *u));
        entry.1.push(j.clone());
        let elsewhere: Vec<PlacedMember> = j
            .placement
            .iter()
            .filter(|m| !on.contains(&m.node))
            .cloned()
            .collect();
        if !elsewhere.is_empty() {
            j.shape.members = elsewhere.len() as u32;
            j.placement = elsewhere;
            j.team = Some(FOREIGN.into());
            j.tier = Some(FOREIGN.into());
            // They hold it until they are gone, by their grace: not to the job's own end.
            if let Some(started) = j.started_at {
                let gone = until.saturating_sub(SLACK_S).max(now);
                j.runtime_s = Some(u64::try_from(gone.saturating_sub(started)).unwrap_or(0));
            }
            kept.push(j);
        }
    }
    out.jobs = kept;
    for (id, (victims, taken_out, waiting)) in found {
        let (Some(waiting), Some((nodes, until))) = (waiting, standing.get(id)) else {
            continue;
        };
        out.nominated.insert(
            id.to_string(),
            Nomination {
                nodes: nodes.clone(),
                until: *until,
                victims,
                waiting,
                taken_out,
            },
        );
    }
    stopping_holders(out, pods);
}

/// What one pass over the jobs finds of a nomination: its victims, the jobs taken out
/// for it, and the job as it waits.
type Found = (Vec<Victim>, Vec<Job>, Option<Job>);

/// The pending jobs whose every member holds a standing nomination to a node that takes
/// work: each member's node, and when the first of them lapses.
fn standing(
    out: &QueueView,
    pods: &BTreeMap<String, PodSeen>,
    seal: Option<&Seal>,
    now: i64,
) -> BTreeMap<String, (Vec<String>, i64)> {
    let usable = |name: &str| {
        out.fleet
            .nodes
            .iter()
            .position(|n| n.name == name)
            .is_some_and(|i| !out.interrupted.contains_key(&i) && !out.closed.contains_key(&i))
    };
    let mut standing = BTreeMap::new();
    for j in out.jobs.iter().filter(|j| j.placement.is_empty()) {
        let Some(keys) = out
            .members
            .get(&j.id)
            .filter(|_| j.members_present.is_none())
        else {
            continue;
        };
        let held: Option<Vec<(&str, i64)>> =
            keys.iter().map(|k| held(pods.get(k)?, seal, now)).collect();
        let Some(held) = held.filter(|h| h.len() == j.shape.members as usize) else {
            continue;
        };
        if held.iter().all(|(n, _)| usable(n)) {
            let until = held.iter().map(|(_, u)| *u).min().unwrap_or(now);
            let nodes = held.into_iter().map(|(n, _)| n.to_string()).collect();
            standing.insert(j.id.clone(), (nodes, until));
        }
    }
    standing
}

/// Running jobs with a member stopping hold their GPUs until they are gone, charged to
/// no team and never picked as victims again.
fn stopping_holders(out: &mut QueueView, pods: &BTreeMap<String, PodSeen>) {
    // Few pods stop at once: most cycles have none, and then no job is looked at.
    let stopping: BTreeSet<&str> = pods
        .iter()
        .filter(|(_, p)| p.terminating)
        .map(|(k, _)| k.as_str())
        .collect();
    if stopping.is_empty() {
        return;
    }
    for j in out.jobs.iter_mut().filter(|j| !j.placement.is_empty()) {
        let stopping = out
            .members
            .get(&j.id)
            .is_some_and(|keys| keys.iter().any(|k| stopping.contains(k.as_str())));
        if stopping && !out.nominated.contains_key(&j.id) {
            j.team = Some(FOREIGN.into());
            j.tier = Some(FOREIGN.into());
        }
    }
}

/// The nomination of `id` does not fit its nodes: the members there of other nominations'
/// victims, and pods stopping there for no standing nomination, hold their GPUs while
/// they stop; they are taken out for it. One plan may evict a job for one preemptor and
/// count its GPUs as freed for another landing beside it (as the replay lets such a
/// preemptor have them), and a nomination that took over a withdrawn one's room counted
/// on the pods stopping there, whose own nomination no longer stands. Nothing is released
/// onto a node while pods stop there (`enact`), so the room is the nomination's only once
/// they are gone. True when any was taken out.
pub fn take_over_stopping(out: &mut QueueView, pods: &BTreeMap<String, PodSeen>, id: &str) -> bool {
    let Some(n) = out.nominated.get(id) else {
        return false;
    };
    let on: BTreeSet<&str> = n.nodes.iter().map(String::as_str).collect();
    let victims: BTreeSet<&str> = out
        .nominated
        .iter()
        .filter(|(other, _)| other.as_str() != id)
        .flat_map(|(_, o)| o.taken_out.iter().map(|j| j.id.as_str()))
        .collect();
    let mut taken = false;
    // Jobs left holding nothing: dropped from the view.
    let mut emptied: BTreeSet<String> = BTreeSet::new();
    for j in out
        .jobs
        .iter_mut()
        .filter(|j| j.team.as_deref() == Some(FOREIGN) && !j.placement.is_empty())
    {
        let before = j.placement.len();
        if victims.contains(j.id.as_str()) {
            j.placement.retain(|m| !on.contains(m.node.as_str()));
        } else if !out.nominated.contains_key(&j.id) {
            // One placement per member stopping on a nominated node: a stopping holder's
            // members that still run keep theirs.
            let keys = out.members.get(&j.id).map_or(&[][..], Vec::as_slice);
            for node in keys
                .iter()
                .filter_map(|k| pods.get(k))
                .filter(|p| p.terminating)
                .filter_map(|p| p.node.as_deref())
                .filter(|node| on.contains(node))
            {
                if let Some(at) = j.placement.iter().position(|m| m.node == node) {
                    j.placement.remove(at);
                }
            }
        }
        if j.placement.len() < before {
            taken = true;
            j.shape.members = j.placement.len() as u32;
            if j.placement.is_empty() {
                emptied.insert(j.id.clone());
            }
        }
    }
    out.jobs.retain(|j| !emptied.contains(&j.id));
    taken
}

/// Gives up the nomination of `id` (it no longer fits its nodes): the job waits again and
/// its victims hold what they hold, stopping or not.
pub fn give_up(out: &mut QueueView, pods: &BTreeMap<String, PodSeen>, id: &str) {
    let Some(n) = out.nominated.remove(id) else {
        return;
    };
    let back: BTreeSet<&str> = n.taken_out.iter().map(|j| j.id.as_str()).collect();
    out.jobs
        .retain(|j| j.id != id && !back.contains(j.id.as_str()));
    out.jobs.push(n.waiting);
    out.jobs.extend(n.taken_out);
    out.jobs.sort_by(|a, b| a.id.cmp(&b.id));
    stopping_holders(out, pods);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nomination_reads_back_and_expires() {
        let t = text("n1", 1_795_510_000);
        assert_eq!(read(&t), Some(("n1", 1_795_510_000)));
        assert_eq!(read("n1"), None);
        assert_eq!(read(" until 2026-11-28T10:00:00Z"), None);
        let seal = Seal::generate();
        assert!(seal.is_ok());
        let Ok(seal) = seal else { return };
        let mut p = crate::pods::pod(&Default::default());
        p.uid = "u1".into();
        p.nominated = Some((t.clone(), sign(&seal, "u1", &t)));
        assert_eq!(
            held(&p, Some(&seal), 1_795_509_999),
            Some(("n1", 1_795_510_000))
        );
        assert_eq!(held(&p, Some(&seal), 1_795_510_000), None, "expired");
        assert_eq!(held(&p, None, 0), None, "no key, no trust");
        // An assignment's seal is not a nomination's.
        p.nominated = Some((t.clone(), seal.sign("u1", &t)));
        assert_eq!(held(&p, Some(&seal), 0), None);
        // Another pod's nomination does not carry over.
        p.nominated = Some((t.clone(), sign(&seal, "u2", &t)));
        assert_eq!(held(&p, Some(&seal), 0), None);
    }
}
