//! The round's grid of free capacity: policy slots from `now` to the horizon,
//! free devices per node and slot, the index of edge nodes by first free slot
//! and the cloud nodes grouped by (class, size, price). Reserving a plan
//! takes its devices off the grid.
//!
//! An edge node is open in a slot in two grades ([`Grade`]), each up to an
//! instant inside the slot, so a segment ends when its window does, not at
//! the last whole slot. The sure grade is open from a P90 window's start
//! until [`crate::Window::usable_until_ms`] (its end less the grace and a
//! margin that grows with the forecast's doubt); the likely grade also in a
//! likely (P50) window, from the policy's `likely_dwell_s` after the box
//! went idle (as measured, [`crate::EdgeAvailability::idle_since_ms`], for
//! the window in progress, with no dwell for a box never seen busy; from
//! its start for one ahead) until its end less
//! the grace, so a box whose load hovers at the threshold gets no work it
//! must give back within minutes. Neither
//! is open while the tide is in, until the window in progress ends. A slot is
//! open in a grade when it starts inside such a stretch; it is open until
//! the stretch ends or the slot does, whichever is first.

use std::cell::RefCell;
use std::collections::HashMap;

use crate::placement::PlacementCost;
use crate::settings::Policy;
use crate::world::{Assignment, NodeKind, WorldSnapshot};

use super::Words;
use super::held::Held;
use super::lan::Lans;
use super::walk::Seg;

/// Node index and workers on it, sorted by node index.
pub(super) type Place = Vec<(usize, u32)>;

/// How sure a plan must be of the edge capacity it uses.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Grade {
    /// P90 windows with forecast-grown margins: for promises (guarantees,
    /// kept reservations, a guaranteed job's stay).
    Sure,
    /// Also P50 windows and a box idle now: for plans that carry no promise.
    Likely,
}

/// Cloud nodes alike in device class, size and price, planned as one.
pub(super) struct CloudGroup {
    pub(super) class: usize,
    pub(super) devices: u32,
    pub(super) price: f64,
    pub(super) nodes: Vec<usize>,
}

/// One round's state: the grid and the indexes over it.
pub(super) struct Round<'a> {
    pub(super) world: &'a WorldSnapshot,
    pub(super) policy: &'a Policy,
    pub(super) now_ms: i64,
    pub(super) base_ms: i64,
    pub(super) n_slots: usize,
    pub(super) id_of: HashMap<&'a str, usize>,
    pub(super) class_of: Vec<usize>,
    pub(super) classes: Vec<&'a str>,
    /// What a placement's links and staging cost.
    pub(super) links: PlacementCost,
    /// `free[node * n_slots + slot]`: devices not yet reserved.
    pub(super) free: Vec<u32>,
    /// `open[node * n_slots + slot][grade]`: ms after the slot's nominal
    /// start (`base_ms + slot × slot_ms`) until which the node may be used
    /// in that slot in that grade; `slot_ms` for the whole slot, 0 for not at all.
    open: Vec<[u32; 2]>,
    /// Edge nodes by first free slot.
    pub(super) edge_index: Vec<usize>,
    /// Slots with any free device, per node (skips fully booked nodes).
    pub(super) free_slot_count: Vec<u32>,
    /// Edge nodes whose `free_slot_count` is not 0: with none, a plan
    /// finds no edge candidate without looking at every node.
    pub(super) edge_open_nodes: usize,
    /// Which slots have a device free, per node: bit `s % 64` of word
    /// `node × bit_words + s / 64`, so how many free slots lie before a
    /// deadline is a few popcounts, not a walk over the slots.
    free_bits: Vec<u64>,
    /// Words of `free_bits` per node.
    bit_words: usize,
    /// First slot with free devices at the start of the round, per node.
    pub(super) first_free: Vec<usize>,
    /// The most slots with a device free that any edge node has at the
    /// start of the round: no edge placement has more free slots later.
    pub(super) edge_most_free: u32,
    /// The device classes of the edge nodes, each once.
    pub(super) edge_classes: Vec<usize>,
    /// [`Round::edge_compute_floor`] by (model, global batch, most workers),
    /// so jobs alike look it up once a round.
    pub(super) compute_floors: RefCell<HashMap<(&'a str, u32, u32), f64>>,
    pub(super) cloud_groups: Vec<CloudGroup>,
    /// `cloud_frees[slot]`: a cloud reservation ends at this slot (capacity may free up).
    pub(super) cloud_frees: Vec<bool>,
    /// Which boxes share a LAN, and the running jobs on each.
    pub(super) lans: Lans,
    /// What running jobs hold at the start of the round.
    pub(super) held: Held,
    /// Whether decisions are put into words.
    pub(super) words: Words,
}

impl<'a> Round<'a> {
    pub(super) fn new(
        world: &'a WorldSnapshot,
        now_ms: i64,
        policy: &'a Policy,
        words: Words,
    ) -> Round<'a> {
        let slot = policy.slot_ms.max(1);
        let base_ms = now_ms.div_euclid(slot) * slot;
        let n_slots = ((now_ms + policy.horizon_ms.max(slot) - base_ms + slot - 1) / slot) as usize;
        let mut classes: Vec<&str> = Vec::new();
        let mut class_of = Vec::with_capacity(world.nodes.len());
        let mut id_of = HashMap::with_capacity(world.nodes.len());
        let mut free = vec![0u32; world.nodes.len() * n_slots];
        let mut open = vec![[0u32; 2]; world.nodes.len() * n_slots];
        let mut free_slot_count = vec![0u32; world.nodes.len()];
        let mut first_free = vec![usize::MAX; world.nodes.len()];
        let mut groups: HashMap<(usize, u32, u64), usize> = HashMap::new();
        let mut cloud_groups: Vec<CloudGroup> = Vec::new();
        for (i, n) in world.nodes.iter().enumerate() {
            id_of.insert(n.id.as_str(), i);
            let c = match classes.iter().position(|c| *c == n.class) {
                Some(c) => c,
                None => {
                    classes.push(n.class.as_str());
                    classes.len() - 1
                }
            };
            class_of.push(c);
            if !n.online || n.devices == 0 {
                continue;
            }
            let row = &mut free[i * n_slots..(i + 1) * n_slots];
            let open_row = &mut open[i * n_slots..(i + 1) * n_slots];
            match &n.kind {
                NodeKind::Cloud { price_per_gpu_hour } => {
                    row.fill(n.devices);
                    open_row.fill([slot as u32; 2]);
                    let key = (c, n.devices, price_per_gpu_hour.to_bits());
                    let g = *groups.entry(key).or_insert_with(|| {
                        cloud_groups.push(CloudGroup {
                            class: c,
                            devices: n.devices,
                            price: *price_per_gpu_hour,
                            nodes: Vec::new(),
                        });
                        cloud_groups.len() - 1
                    });
                    cloud_groups[g].nodes.push(i);
                }
                NodeKind::Edge(av) => {
                    let mut blocked_until = i64::MIN;
                    if av.tide_in() {
                        blocked_until = av
                            .likely_windows()
                            .iter()
                            .chain(&av.windows)
                            .filter(|w| w.start_ms <= now_ms && now_ms < w.end_ms)
                            .map(|w| w.end_ms)
                            .max()
                            .unwrap_or(now_ms);
                    }
                    let grace = policy.grace_ms;
                    let sure: Vec<(i64, i64)> = av
                        .windows
                        .iter()
                        .map(|w| (w.start_ms, w.usable_until_ms(now_ms, grace)))
                        .collect();
                    let likely: Vec<(i64, i64)> = av
                        .likely_windows()
                        .iter()
                        .map(|w| {
                            let in_progress = w.start_ms <= now_ms && now_ms < w.end_ms;
                            let from = match av.idle_since_ms {
                                Some(t) if in_progress => t + policy.likely_dwell_ms,
                                None if in_progress => w.start_ms,
                                _ => w.start_ms + policy.likely_dwell_ms,
                            };
                            (from, w.end_ms - grace)
                        })
                        .filter(|&(from, until)| from < until)
                        .collect();
                    let (mut sure, mut likely) = (sure.iter().peekable(), likely.iter().peekable());
                    for s in 0..n_slots {
                        let (start, end) = slot_bounds(now_ms, base_ms, slot, s);
                        if start < blocked_until {
                            continue;
                        }
                        let nominal = base_ms + s as i64 * slot;
                        let sure_until = open_until(&mut sure, start, end);
                        let likely_until = open_until(&mut likely, start, end).max(sure_until);
                        if likely_until > start {
                            row[s] = n.devices;
                            open_row[s] = [
                                (sure_until.max(nominal) - nominal) as u32,
                                (likely_until - nominal) as u32,
                            ];
                            first_free[i] = first_free[i].min(s);
                        }
                    }
                }
            }
            free_slot_count[i] = row.iter().filter(|&&f| f > 0).count() as u32;
        }
        let bit_words = n_slots.div_ceil(64);
        let mut free_bits = vec![0u64; world.nodes.len() * bit_words];
        for (k, _) in free.iter().enumerate().filter(|(_, f)| **f > 0) {
            let (q, s) = (k / n_slots, k % n_slots);
            free_bits[q * bit_words + s / 64] |= 1 << (s % 64);
        }
        let mut edge_index: Vec<usize> = (0..world.nodes.len())
            .filter(|&i| first_free[i] != usize::MAX)
            .collect();
        edge_index.sort_by_key(|&i| (first_free[i], std::cmp::Reverse(free_slot_count[i]), i));
        let edge_open_nodes = edge_index
            .iter()
            .filter(|&&i| free_slot_count[i] > 0)
            .count();
        let is_edge = |i: usize| matches!(world.nodes[i].kind, NodeKind::Edge(_));
        let edge_most_free = (0..world.nodes.len())
            .filter(|&i| is_edge(i))
            .map(|i| free_slot_count[i])
            .max()
            .unwrap_or(0);
        let mut edge_classes: Vec<usize> = (0..world.nodes.len())
            .filter(|&i| is_edge(i))
            .map(|i| class_of[i])
            .collect();
        edge_classes.sort_unstable();
        edge_classes.dedup();
        let links = PlacementCost::new(
            world
                .nodes
                .iter()
                .map(|n| (n.id.as_str(), matches!(n.kind, NodeKind::Cloud { .. }))),
            &world.links,
        );
        let lans = Lans::new(world, &links, |id| id_of.get(id).copied());
        let held = Held::new(world, |id| id_of.get(id).copied());
        let links = links.with_sites((0..world.nodes.len()).map(|q| lans.group_of(q)));
        Round {
            world,
            policy,
            now_ms,
            base_ms,
            n_slots,
            id_of,
            class_of,
            classes,
            links,
            lans,
            held,
            words,
            free,
            open,
            edge_index,
            free_slot_count,
            edge_open_nodes,
            free_bits,
            bit_words,
            first_free,
            edge_most_free,
            edge_classes,
            compute_floors: RefCell::new(HashMap::new()),
            cloud_groups,
            cloud_frees: vec![false; n_slots + 1],
        }
    }

    pub(super) fn slot_start(&self, s: usize) -> i64 {
        slot_bounds(self.now_ms, self.base_ms, self.policy.slot_ms.max(1), s).0
    }

    pub(super) fn slot_end(&self, s: usize) -> i64 {
        slot_bounds(self.now_ms, self.base_ms, self.policy.slot_ms.max(1), s).1
    }

    /// The slot containing `t` (t ≥ now), clamped to the grid.
    pub(super) fn slot_of(&self, t: i64) -> usize {
        (((t.max(self.now_ms) - self.base_ms) / self.policy.slot_ms.max(1)) as usize)
            .min(self.n_slots)
    }

    /// Slots whose start is before `t`: none when `t ≤ now` (slot 0 starts
    /// at `now`), else `⌈(t − base) / slot⌉` (ms / ms), at least 1 and at
    /// most the grid's slots.
    pub(super) fn slots_before(&self, t: i64) -> usize {
        if t <= self.now_ms {
            return 0;
        }
        let slot = self.policy.slot_ms.max(1);
        let span = t - self.base_ms;
        let s = span.div_euclid(slot) + i64::from(span.rem_euclid(slot) > 0);
        (s.max(1) as u64).min(self.n_slots as u64) as usize
    }

    /// The first slot in `[s, limit)` where every node of `place` has a
    /// device free, or `limit`: no slot before it can be usable.
    pub(super) fn next_free(&self, place: &[(usize, u32)], mut s: usize, limit: usize) -> usize {
        let limit = limit.min(self.n_slots);
        while s < limit {
            let (w, b) = (s / 64, s % 64);
            let all = place.iter().fold(u64::MAX, |acc, &(q, _)| {
                acc & self.free_bits[q * self.bit_words + w]
            }) >> b;
            if all != 0 {
                return (s + all.trailing_zeros() as usize).min(limit);
            }
            s = (w + 1) * 64;
        }
        limit
    }

    pub(super) fn is_cloud(&self, node: usize) -> bool {
        self.links.is_cloud(node)
    }

    /// Whether any cloud node has a device free in the slot in progress: a
    /// plan that must start there on the cloud needs one, so without it a
    /// busy round skips pricing every job's cloud shapes.
    pub(super) fn cloud_free_now(&self) -> bool {
        self.cloud_groups
            .iter()
            .flat_map(|g| &g.nodes)
            .any(|&q| self.free[q * self.n_slots] > 0)
    }

    /// `place` by node id, as plans and actions name it.
    pub(super) fn assignments(&self, place: &[(usize, u32)]) -> Vec<Assignment> {
        place
            .iter()
            .map(|&(q, w)| Assignment {
                node_id: self.world.nodes[q].id.clone(),
                workers: w,
            })
            .collect()
    }

    /// Node indices of `on`, sorted; nodes this round does not know are dropped.
    pub(super) fn indices(&self, on: &[Assignment]) -> Place {
        let mut p: Place = on
            .iter()
            .filter_map(|a| Some((*self.id_of.get(a.node_id.as_str())?, a.workers)))
            .collect();
        p.sort_unstable();
        p
    }

    /// Whether every node of `place` has its workers free in slot `s` and
    /// is open in `grade` at the slot's start.
    pub(super) fn usable(&self, place: &[(usize, u32)], s: usize, grade: Grade) -> bool {
        place
            .iter()
            .all(|&(q, w)| self.free[q * self.n_slots + s] >= w)
            && self.open_until(place, s, grade) > self.slot_start(s)
    }

    /// The instant (Unix ms) until which every node of `place` is open in
    /// `grade` in slot `s`: the slot's end, or earlier where a window ends
    /// inside it.
    pub(super) fn open_until(&self, place: &[(usize, u32)], s: usize, grade: Grade) -> i64 {
        let nominal = self.base_ms + s as i64 * self.policy.slot_ms.max(1);
        let g = grade as usize;
        let open = place
            .iter()
            .map(|&(q, _)| self.open[q * self.n_slots + s][g])
            .min()
            .unwrap_or(0);
        nominal + i64::from(open)
    }

    /// Whether `segs` use edge capacity only where the sure grade is open:
    /// a plan that may become a promise.
    pub(super) fn on_sure(&self, segs: &[Seg]) -> bool {
        segs.iter().all(|g| {
            (g.first_slot..g.end_slot.min(self.n_slots)).all(|s| {
                self.open_until(&g.place, s, Grade::Sure) >= g.end_ms.min(self.slot_end(s))
            })
        })
    }

    pub(super) fn price(&self, place: &[(usize, u32)]) -> f64 {
        place
            .iter()
            .map(|&(q, w)| match self.world.nodes[q].kind {
                NodeKind::Cloud { price_per_gpu_hour } => price_per_gpu_hour * f64::from(w),
                NodeKind::Edge(_) => 0.0,
            })
            .sum()
    }

    pub(super) fn reserve(&mut self, segs: &[Seg]) {
        for s in segs {
            if s.place.iter().any(|&(q, _)| self.is_cloud(q)) {
                self.cloud_frees[s.end_slot.min(self.n_slots)] = true;
            }
            for &(q, w) in &s.place {
                for slot in s.first_slot..s.end_slot.min(self.n_slots) {
                    let f = self.free[q * self.n_slots + slot].saturating_sub(w);
                    self.set_free(q, slot, f);
                    if f == 0 {
                        let before = self.free_slot_count[q];
                        self.free_slot_count[q] = before.saturating_sub(1);
                        if before == 1 && self.first_free[q] != usize::MAX {
                            self.edge_open_nodes -= 1;
                        }
                    }
                }
            }
        }
    }

    /// Sets node `q`'s free devices in slot `s`, keeping `free_bits` in step.
    pub(super) fn set_free(&mut self, q: usize, s: usize, devices: u32) {
        self.free[q * self.n_slots + s] = devices;
        let (word, bit) = (q * self.bit_words + s / 64, 1u64 << (s % 64));
        if devices > 0 {
            self.free_bits[word] |= bit;
        } else {
            self.free_bits[word] &= !bit;
        }
    }

    /// How many of slots `[0, limit)` have a device free on node `q`.
    pub(super) fn free_slots_before(&self, q: usize, limit: usize) -> u32 {
        let limit = limit.min(self.n_slots);
        let row = &self.free_bits[q * self.bit_words..(q + 1) * self.bit_words];
        let whole: u32 = row[..limit / 64].iter().map(|w| w.count_ones()).sum();
        let part = match limit % 64 {
            0 => 0,
            r => (row[limit / 64] & ((1u64 << r) - 1)).count_ones(),
        };
        whole + part
    }
}

/// The end of the open stretch among `stretches` ((from, until), Unix ms,
/// ascending) that slot `[start, end)` starts in, capped at `end`; `start`
/// (closed) when it starts in none. Stretches ending before `start` are
/// passed over for good, as slots come in order.
fn open_until<'s>(
    stretches: &mut std::iter::Peekable<impl Iterator<Item = &'s (i64, i64)>>,
    start: i64,
    end: i64,
) -> i64 {
    while stretches.peek().is_some_and(|&&(_, until)| until <= start) {
        stretches.next();
    }
    match stretches.peek() {
        Some(&&(from, until)) if from <= start => until.min(end),
        _ => start,
    }
}

pub(super) fn slot_bounds(now_ms: i64, base_ms: i64, slot: i64, s: usize) -> (i64, i64) {
    let start = base_ms + s as i64 * slot;
    (start.max(now_ms), start + slot)
}

#[cfg(test)]
mod tests {
    use super::super::Words;
    use super::super::testkit::{H, world};
    use super::*;

    const MIN: i64 = 60_000;

    /// From 18:05 with 15-minute slots, slot 0 runs from 18:05 to 18:15 and
    /// slot k ≥ 1 from 18:00 + 15k min: a time of 18:15 has one slot
    /// starting before it, 18:15 and a millisecond two, and now none.
    #[test]
    fn slots_before_counts_the_slots_that_start_before_a_time() {
        let w = world();
        let policy = Policy::default();
        let now = 18 * H + 5 * MIN;
        let round = Round::new(&w, now, &policy, Words::Skip);
        assert_eq!(round.slots_before(now - 1), 0);
        assert_eq!(round.slots_before(now), 0);
        assert_eq!(round.slots_before(now + 1), 1);
        assert_eq!(round.slots_before(18 * H + 15 * MIN), 1);
        assert_eq!(round.slots_before(18 * H + 15 * MIN + 1), 2);
        assert_eq!(round.slots_before(i64::MAX), round.n_slots);
        for t in (now - H..now + 50 * H).step_by(7 * MIN as usize + 13) {
            let by_scan = (0..=round.n_slots)
                .find(|&s| s == round.n_slots || round.slot_start(s) >= t)
                .unwrap();
            assert_eq!(round.slots_before(t), by_scan, "t = {t}");
        }
    }

    /// c1 is taken in slots 0-2 and 66-129: from slot 0 the first free slot
    /// is 3, from 66 it is 130 (across a word of the bitset), and a limit
    /// before that is where the search stops.
    #[test]
    fn next_free_skips_the_slots_a_place_has_no_device_in() {
        let w = world();
        let policy = Policy::default();
        let mut round = Round::new(&w, 18 * H, &policy, Words::Skip);
        for s in (0..3).chain(66..130) {
            round.set_free(0, s, 0);
        }
        let c1 = [(0, 1)];
        assert_eq!(round.next_free(&c1, 0, round.n_slots), 3);
        assert_eq!(round.next_free(&c1, 4, round.n_slots), 4);
        assert_eq!(round.next_free(&c1, 66, round.n_slots), 130);
        assert_eq!(round.next_free(&c1, 66, 100), 100);
        assert_eq!(round.free_slots_before(0, 10), 7);
        assert_eq!(round.free_slots_before(0, 130), 130 - 3 - 64);
    }
}
