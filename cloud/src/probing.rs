//! Which peers an edge should probe, so that probing spends bytes only on the
//! links the scheduler uses and only when their estimate is due: each pair of
//! edges within `k` places of each other in node-id order (wrapping around)
//! is measured from one end, and only once its latest measurement is older
//! than [`due_after_ms`].

/// How old a link's measurement may grow before it is probed again: seven
/// eighths of the staleness, so that an edge that asks hourly re-measures it
/// before it goes stale even when one round fails.
pub fn due_after_ms(stale_secs: u64) -> i64 {
    (stale_secs as i64 * 1000) / 8 * 7
}

/// The edges that `me` measures among `ids` (sorted, `me` among them): those
/// whose forward distance d from `me` (wrapping around n ids) is at most `k`
/// and shorter than the way back, the lower id taking a pair exactly halfway
/// round. Each pair within `k` of each other thus falls to exactly one end.
pub fn assigned<'a>(ids: &[&'a str], me: &str, k: usize) -> Vec<&'a str> {
    let n = ids.len();
    let Some(i) = ids.iter().position(|id| *id == me) else {
        return Vec::new();
    };
    (1..n)
        .filter(|&d| d <= k && (d < n - d || (2 * d == n && i < (i + d) % n)))
        .map(|d| ids[(i + d) % n])
        .collect()
}

/// Whether the link to `peer` is due for a probe at `now_ms`: never measured,
/// or last measured (`measured`, by either end: (peer, Unix ms)) more than
/// `due_after_ms` ago.
pub fn due(measured: &[(String, i64)], peer: &str, now_ms: i64, due_after_ms: i64) -> bool {
    measured
        .iter()
        .find(|(other, _)| other == peer)
        .is_none_or(|(_, t)| now_ms - t > due_after_ms)
}

/// Edge pairs handed out and not yet measured: (the pair, lower id first) →
/// (the end that probes it, Unix ms when it was handed out).
pub type Pending = std::collections::HashMap<(String, String), (String, i64)>;

/// Claims the probe of `me`–`peer` for `me` at `now_ms`, unless the other end
/// was given it within `due_after_ms` (the set of connected edges, and so
/// [`assigned`], can change between the two ends' asks: an edge that
/// connected later would otherwise probe a link its peer is measuring).
/// The same end may be given its pair again (its probe may have failed).
pub fn claim(pending: &mut Pending, me: &str, peer: &str, now_ms: i64, due_after_ms: i64) -> bool {
    let pair = if me < peer {
        (me.to_string(), peer.to_string())
    } else {
        (peer.to_string(), me.to_string())
    };
    match pending.get(&pair) {
        Some((end, at)) if end != me && now_ms - at <= due_after_ms => false,
        _ => {
            pending.insert(pair, (me.to_string(), now_ms));
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_handed_to_one_end_is_not_handed_to_the_other_until_due() {
        let mut pending = Pending::new();
        assert!(claim(&mut pending, "a", "c", 0, 100));
        assert!(!claim(&mut pending, "c", "a", 50, 100), "the other end");
        assert!(claim(&mut pending, "a", "c", 60, 100), "the same end again");
        assert!(
            !claim(&mut pending, "c", "a", 160, 100),
            "60 + 100 not yet past"
        );
        assert!(
            claim(&mut pending, "c", "a", 161, 100),
            "past due: either end"
        );
    }

    #[test]
    fn each_pair_within_k_falls_to_exactly_one_end() {
        for n in 1..=9 {
            let names: Vec<String> = (0..n).map(|i| format!("e{i}")).collect();
            let ids: Vec<&str> = names.iter().map(String::as_str).collect();
            for k in 0..=4 {
                let mut pairs = Vec::new();
                for me in &ids {
                    for peer in assigned(&ids, me, k) {
                        assert_ne!(*me, peer);
                        pairs.push(if *me < peer { (*me, peer) } else { (peer, *me) });
                    }
                }
                let total = pairs.len();
                pairs.sort();
                pairs.dedup();
                assert_eq!(pairs.len(), total, "n {n}, k {k}: a pair probed twice");
                // The pairs within k places either way round.
                let within = (0..n)
                    .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
                    .filter(|(a, b)| (b - a).min(n - (b - a)) <= k)
                    .count();
                assert_eq!(total, within, "n {n}, k {k}");
            }
        }
        // Four edges, three peers each: all six pairs, at most two per edge.
        let ids = ["a", "b", "c", "d"];
        assert_eq!(assigned(&ids, "a", 3), ["b", "c"]);
        assert_eq!(assigned(&ids, "b", 3), ["c", "d"]);
        assert_eq!(assigned(&ids, "c", 3), ["d"]);
        assert_eq!(assigned(&ids, "d", 3), ["a"]);
        assert!(assigned(&ids, "zz", 3).is_empty());
    }

    #[test]
    fn a_link_is_due_unmeasured_or_past_seven_eighths_of_the_staleness() {
        let due_after = due_after_ms(86_400);
        assert_eq!(due_after, 75_600_000, "21 h of 24");
        let measured = vec![("b".to_string(), 1_000)];
        assert!(due(&measured, "c", 1_000, due_after));
        assert!(!due(&measured, "b", 1_000 + due_after, due_after));
        assert!(due(&measured, "b", 1_001 + due_after, due_after));
    }
}
