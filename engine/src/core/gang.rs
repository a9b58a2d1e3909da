//! Jobs as gangs: `members` identical members placed all or none, inside one topology
//! group when the job requires it (same node, NVLink domain, rack or leaf), inside one when
//! it can if the job prefers it. A job that cannot be placed gets a typed reason that says
//! whether it could ever fit this fleet.

use super::alloc::{NodeFree, Request};
use super::fleet::Node;
use super::packing::{self, Context};
use super::placer::{Choice, Placer};
use lang::ir::TopologyLevel;
use serde::Serialize;

/// The shape of a job: `members` × `member`, on nodes of `pools` (empty: any pool).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct JobShape {
    pub members: u32,
    pub member: Request,
    pub pools: Vec<String>,
    pub topology_required: Option<TopologyLevel>,
    pub topology_preferred: Option<TopologyLevel>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UnplacedCode {
    /// No node (in the allowed pools) has an allowed GPU model or the MIG profile.
    NoSuchModel,
    /// A member needs more than any single node has, even empty.
    NeverFits,
    /// The required topology group cannot hold the gang, even empty.
    TopologyUnsatisfiable,
    /// It would fit the empty fleet; it does not fit what is free now.
    NoCapacity,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unplaced {
    pub code: UnplacedCode,
    pub message: String,
}

pub fn level_name(level: TopologyLevel) -> &'static str {
    match level {
        TopologyLevel::NvlinkIsland => "nvlink_island",
        TopologyLevel::Node => "node",
        TopologyLevel::NvlinkDomain => "nvlink_domain",
        TopologyLevel::Rack => "rack",
        TopologyLevel::Leaf => "leaf",
        TopologyLevel::Any => "any",
    }
}

/// How many members of `r` fit on a node in state `free`.
pub fn member_slots(ctx: &Context<'_>, node: &Node, free: &NodeFree, r: &Request) -> u64 {
    if !r.accepts_node(node) {
        return 0;
    }
    let per = |have: u64, need: u64| have.checked_div(need).unwrap_or(u64::MAX);
    let by_gpu = if r.num_gpu == 0 {
        u64::MAX
    } else if r.mig_profile.is_some() {
        u64::from(packing::feasible(ctx, node, free, r))
    } else if r.is_share() {
        free.share_slots(r)
    } else {
        free.count_serving(r) as u64 / u64::from(r.num_gpu)
    };
    by_gpu
        .min(per(free.cpu_milli, r.cpu_milli))
        .min(per(free.memory_mib, r.memory_mib))
}

/// The level a placement must or should stay inside, if it is a real grouping.
fn grouping(level: Option<TopologyLevel>) -> Option<TopologyLevel> {
    level.filter(|l| !matches!(l, TopologyLevel::Any | TopologyLevel::NvlinkIsland))
}

/// Places `job` whole, or nothing and a reason.
pub fn place_job(placer: &mut Placer<'_>, job: &JobShape) -> Result<Vec<Choice>, Unplaced> {
    place_job_within(placer, job, &|_| true)
}

/// [`place_job`] on the nodes `within` allows (e.g. not those reserved for another job).
/// The reason still says whether the job could ever fit its pools.
pub fn place_job_within(
    placer: &mut Placer<'_>,
    job: &JobShape,
    within: &dyn Fn(usize) -> bool,
) -> Result<Vec<Choice>, Unplaced> {
    let pool_ok = placer.in_pools(&job.pools);
    let is_allowed = |i: usize| pool_ok(i) && within(i);
    if job.members == 0 {
        return Ok(Vec::new());
    }
    if let Some(level) = grouping(job.topology_required) {
        return match place_in_groups(placer, job, level, &is_allowed) {
            Some(c) => Ok(c),
            None => Err(explain(placer, job, &pool_ok)),
        };
    }
    if let Some(level) = grouping(job.topology_preferred) {
        if job.members > 1 {
            if let Some(c) = place_in_groups(placer, job, level, &is_allowed) {
                return Ok(c);
            }
        }
    }
    // A gang that the free room of every node together cannot hold is not tried member
    // by member (each try commits and undoes).
    if job.members > 1 && placer.room_bound(&job.member) < u64::from(job.members) {
        return Err(explain(placer, job, &pool_ok));
    }
    place_members(placer, job, &is_allowed).ok_or_else(|| explain(placer, job, &pool_ok))
}

/// Where a job of one member and no required topology group would go, without taking
/// it: the placer is left as it was, so a caller that may turn the placement down (the
/// quota check) need not commit and give it back. `None` for other shapes, which
/// [`place_job_within`] places member by member. Otherwise the same choice, or reason.
pub fn choose_single(
    placer: &mut Placer<'_>,
    job: &JobShape,
    within: &dyn Fn(usize) -> bool,
) -> Option<Result<Vec<Choice>, Unplaced>> {
    if job.members != 1 || grouping(job.topology_required).is_some() {
        return None;
    }
    let pool_ok = placer.in_pools(&job.pools);
    let is_allowed = |i: usize| pool_ok(i) && within(i);
    Some(match placer.choose(&job.member, &is_allowed) {
        Some(c) => Ok(vec![c]),
        None => Err(explain(placer, job, &pool_ok)),
    })
}

/// Places every member with `allowed`, or undoes what it placed and returns `None`.
fn place_members(
    placer: &mut Placer<'_>,
    job: &JobShape,
    allowed: &dyn Fn(usize) -> bool,
) -> Option<Vec<Choice>> {
    place_each(placer, job, |p| p.choose(&job.member, allowed))
}

/// Commits `job.members` choices from `pick`; if one is missing, undoes the others.
fn place_each(
    placer: &mut Placer<'_>,
    job: &JobShape,
    mut pick: impl FnMut(&mut Placer<'_>) -> Option<Choice>,
) -> Option<Vec<Choice>> {
    let mut done: Vec<(Choice, NodeFree)> = Vec::new();
    for _ in 0..job.members {
        let placed = pick(placer).and_then(|c| {
            placer
                .commit_undoable(&job.member, &c)
                .map(|prev| (c, prev))
        });
        match placed {
            Some(p) => done.push(p),
            None => {
                for (c, prev) in done.into_iter().rev() {
                    placer.undo(c.node, prev);
                }
                return None;
            }
        }
    }
    Some(done.into_iter().map(|(c, _)| c).collect())
}

/// Picks the group to place in without trial placements: of the groups whose free room
/// holds every member (room per node is exact for identical members, so the placement
/// below cannot fail), the one with the fewest free GPUs, so large groups stay whole for
/// large gangs; ties to the first group in name order. Then places inside it.
fn place_in_groups(
    placer: &mut Placer<'_>,
    job: &JobShape,
    level: TopologyLevel,
    allowed: &dyn Fn(usize) -> bool,
) -> Option<Vec<Choice>> {
    placer.track_group_free(level);
    let ctx = placer.context();
    let fleet = placer.fleet();
    let groups = placer.groups(level);
    let mut best: Option<(u64, usize)> = None;
    // Groups whose free GPUs cannot hold every member are not visited.
    for g in placer.groups_with_room(level, &job.member, u64::from(job.members)) {
        let Some((_, nodes)) = groups.get(g) else {
            continue;
        };
        let (mut room, mut free_milli) = (0u64, 0u64);
        for &i in nodes.iter().filter(|i| allowed(**i)) {
            let (Some(node), Some(free)) = (fleet.nodes.get(i), placer.state().nodes.get(i)) else {
                continue;
            };
            room = room.saturating_add(member_slots(&ctx, node, free, &job.member));
            free_milli += free.gpu_milli_total();
        }
        if room >= u64::from(job.members) && best.is_none_or(|b| (free_milli, g) < b) {
            best = Some((free_milli, g));
        }
    }
    let (_, g) = best?;
    let nodes: Vec<usize> = placer
        .groups(level)
        .get(g)?
        .1
        .iter()
        .copied()
        .filter(|i| allowed(*i))
        .collect();
    place_each(placer, job, |p| p.choose_among(&nodes, &job.member))
}

/// Why `job` is not placed: first what can never fit this fleet, then what is full now.
fn explain(placer: &mut Placer<'_>, job: &JobShape, allowed: &dyn Fn(usize) -> bool) -> Unplaced {
    let verdict = match placer.verdicts.get(job) {
        Some(v) => v.clone(),
        None => {
            let v = never_fits(placer, job, allowed);
            placer.verdicts.insert(job.clone(), v.clone());
            v
        }
    };
    verdict.unwrap_or_else(|| {
        if placer.quiet {
            Unplaced {
                code: UnplacedCode::NoCapacity,
                message: String::new(),
            }
        } else {
            not_now(placer, job, allowed)
        }
    })
}

/// Why `job` can never be placed on this fleet (its pools, models, node sizes and
/// topology groups, all empty), if it cannot; memoised per shape by the caller.
fn never_fits(
    placer: &Placer<'_>,
    job: &JobShape,
    allowed: &dyn Fn(usize) -> bool,
) -> Option<Unplaced> {
    let ctx = placer.context();
    let fleet = placer.fleet();
    let r = &job.member;
    // Each check stops at the first node that passes it: a shape that can fit is judged
    // by a few nodes, not every node of the fleet (a cycle judges every shape it sees).
    let nodes = || fleet.nodes.iter().enumerate().filter(|(i, _)| allowed(*i));
    let pools = pools_text(job);
    if nodes().next().is_none() {
        return Some(Unplaced {
            code: UnplacedCode::NoSuchModel,
            message: format!("no node{pools}"),
        });
    }
    if r.num_gpu > 0 && !nodes().any(|(_, n)| r.accepts_node(n)) {
        return Some(Unplaced {
            code: UnplacedCode::NoSuchModel,
            message: format!("no node{pools} has model {}", r.models.join(" or ")),
        });
    }
    if let Some(profile) = &r.mig_profile {
        let offers = |n: &Node| {
            n.gpus
                .iter()
                .any(|g| g.mig.is_some() && ctx.mig.profile(&g.model, profile).is_some())
        };
        if !nodes().any(|(_, n)| offers(n)) {
            return Some(Unplaced {
                code: UnplacedCode::NoSuchModel,
                message: format!("no node{pools} has a MIG-mode GPU offering profile {profile}"),
            });
        }
    }
    let empty = placer.empty_state();
    let empty_slots = |i: usize, n: &Node| {
        empty
            .nodes
            .get(i)
            .map_or(0, |f| member_slots(&ctx, n, f, r))
    };
    if !nodes().any(|(i, n)| empty_slots(i, n) > 0) {
        let most = nodes()
            .filter(|(_, n)| r.accepts_node(n))
            .map(|(_, n)| {
                n.gpus
                    .iter()
                    .filter(|g| g.healthy && g.mig.is_none())
                    .count()
            })
            .max()
            .unwrap_or(0);
        let mig_note = if r.mig_profile.is_none()
            && nodes().any(|(_, n)| n.gpus.iter().any(|g| g.mig.is_some()))
        {
            "; GPUs in MIG mode take MIG instances only"
        } else {
            ""
        };
        let mut needs = vec![describe(r)];
        if r.vram_mib > 0 {
            needs.push(format!("{} MiB of GPU memory each", r.vram_mib));
        }
        if r.cpu_milli > 0 {
            needs.push(format!("{} CPU", r.cpu_milli as f64 / 1000.0));
        }
        if r.memory_mib > 0 {
            needs.push(format!("{} MiB of memory", r.memory_mib));
        }
        return Some(Unplaced {
            code: UnplacedCode::NeverFits,
            message: format!(
                "a member needs {} on one node; no node{pools} has that, even empty (the largest has {most} usable GPU{}{mig_note})",
                needs.join(", "),
                if most == 1 { "" } else { "s" }
            ),
        });
    }
    if let Some(level) = grouping(job.topology_required) {
        // Members a group holds when empty; `None` for a group with no allowed node.
        let room = |group: &[usize]| {
            let mut any = false;
            let mut slots = 0u64;
            for &i in group.iter().filter(|i| allowed(**i)) {
                any = true;
                if let Some(n) = fleet.nodes.get(i) {
                    slots = slots.saturating_add(empty_slots(i, n));
                }
            }
            any.then_some(slots)
        };
        let members = u64::from(job.members);
        let groups = placer.groups(level);
        if groups
            .iter()
            .any(|(_, g)| room(g).is_some_and(|slots| slots >= members))
        {
            return None;
        }
        let Some(best_empty) = groups.iter().filter_map(|(_, g)| room(g)).max() else {
            return Some(Unplaced {
                code: UnplacedCode::TopologyUnsatisfiable,
                message: format!(
                    "{} members must share one {}, but no node{pools} has a `{}` label",
                    job.members,
                    level_name(level),
                    level_name(level)
                ),
            });
        };
        return Some(Unplaced {
            code: UnplacedCode::TopologyUnsatisfiable,
            message: format!(
                "{} members must share one {}; no {}{pools} can hold more than {best_empty}",
                job.members,
                level_name(level),
                level_name(level)
            ),
        });
    }
    None
}

/// [`not_now`] by the placer's own scan, for checking a caller's index against it.
#[cfg(debug_assertions)]
pub fn not_now_by_scan(placer: &Placer<'_>, job: &JobShape) -> Unplaced {
    not_now(placer, job, &placer.in_pools(&job.pools))
}

/// The topology group a job's members must share, if it names a real grouping.
pub fn required_grouping(job: &JobShape) -> Option<TopologyLevel> {
    grouping(job.topology_required)
}

/// Why a job whose members must share one group at `level` does not fit now, when the
/// freest such group holds `best_now` of its members.
pub fn group_short(job: &JobShape, level: TopologyLevel, best_now: u64) -> Unplaced {
    Unplaced {
        code: UnplacedCode::NoCapacity,
        message: format!(
            "{} members must share one {}; the freest {} has room for {best_now} now",
            job.members,
            level_name(level),
            level_name(level)
        ),
    }
}

/// Why `job`, which fits the empty fleet, does not fit what is free now.
pub fn not_now(placer: &Placer<'_>, job: &JobShape, allowed: &dyn Fn(usize) -> bool) -> Unplaced {
    let ctx = placer.context();
    let fleet = placer.fleet();
    let r = &job.member;
    if let Some(level) = grouping(job.topology_required) {
        if placer.group_room_elsewhere {
            return Unplaced {
                code: UnplacedCode::NoCapacity,
                message: String::new(),
            };
        }
        // The freest group's room: groups in order of their bound, until no bound beats it.
        // A heap, not a sort: the walk below mostly stops after the first group or two.
        let mut bounded: std::collections::BinaryHeap<(u64, usize)> = placer
            .groups_with_room(level, r, 1)
            .into_iter()
            .map(|g| (placer.group_room_bound(level, g, r), g))
            .collect();
        let groups = placer.groups(level);
        let mut best_now = 0u64;
        while let Some((bound, g)) = bounded.pop() {
            if bound <= best_now {
                break;
            }
            let Some((_, nodes)) = groups.get(g) else {
                continue;
            };
            let room = nodes
                .iter()
                .filter(|i| allowed(**i))
                .filter_map(|i| {
                    Some(member_slots(
                        &ctx,
                        fleet.nodes.get(*i)?,
                        placer.state().nodes.get(*i)?,
                        r,
                    ))
                })
                .fold(0u64, u64::saturating_add);
            best_now = best_now.max(room);
        }
        return group_short(job, level, best_now);
    }
    let pools = pools_text(job);
    if job.members == 1 {
        // Several whole GPUs: "none is free" read as false beside idle GPUs. Worded
        // without counts, which placements later in the cycle would make stale.
        let message = if r.num_gpu > 1 && r.mig_profile.is_none() && !r.is_share() {
            format!(
                "needs {} on one node; no node has that many free{pools} now",
                describe(r)
            )
        } else {
            format!("needs {}; none is free{pools} now", describe(r))
        };
        return Unplaced {
            code: UnplacedCode::NoCapacity,
            message,
        };
    }
    // Counted per class of identical nodes, not per node.
    let now: u64 = placer
        .classes()
        .filter_map(|(free, members)| {
            let first = members.iter().find(|i| allowed(**i))?;
            let slots = member_slots(&ctx, fleet.nodes.get(*first)?, free, r);
            // Full classes are not counted node by node.
            if slots == 0 {
                return None;
            }
            let count = members.iter().filter(|i| allowed(**i)).count() as u64;
            Some(slots.saturating_mul(count))
        })
        .fold(0u64, u64::saturating_add);
    Unplaced {
        code: UnplacedCode::NoCapacity,
        message: format!(
            "needs {} members of {}; free capacity{pools} holds {now} now",
            job.members,
            describe(r)
        ),
    }
}

/// A member in words: `4 GPUs`, `1 GPU of 500m`, `1 MIG 3g.40gb`, `CPU only`.
pub fn describe(r: &Request) -> String {
    let gpus = match (&r.mig_profile, r.num_gpu) {
        (_, 0) => "CPU only".to_string(),
        (Some(p), n) => format!("{n} MIG {p}"),
        (None, 1) if r.gpu_milli < 1000 => format!("1 GPU of {}m", r.gpu_milli),
        (None, 1) => "1 GPU".to_string(),
        (None, n) => format!("{n} GPUs"),
    };
    if r.models.is_empty() {
        gpus
    } else {
        format!("{gpus} ({})", r.models.join(" or "))
    }
}

/// ` in pool a or b` for messages; empty when any pool will do.
fn pools_text(job: &JobShape) -> String {
    if job.pools.is_empty() {
        String::new()
    } else {
        format!(" in pool {}", job.pools.join(" or "))
    }
}
