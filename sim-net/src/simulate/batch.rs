//! Many independent simulation runs spread over the machine's cores: each
//! worker takes the next run not yet started, so long and short runs balance.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `f(i, item)` for every item, on up to `available_parallelism` threads;
/// the results come back in the items' order.
pub fn parallel_map<T: Sync, R: Send>(items: &[T], f: impl Fn(usize, &T) -> R + Sync) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len())
        .max(1);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else {
                        break;
                    };
                    let r = f(i, item);
                    results.lock().expect("no thread panics holding it")[i] = Some(r);
                }
            });
        }
    });
    results
        .into_inner()
        .expect("no thread panicked")
        .into_iter()
        .map(|r| r.expect("every item was run"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_order() {
        let items: Vec<u64> = (0..50).collect();
        let out = parallel_map(&items, |i, &x| (i as u64) * 1000 + x * x);
        assert_eq!(out, (0..50).map(|x| x * 1000 + x * x).collect::<Vec<_>>());
        assert!(parallel_map(&[] as &[u8], |_, _| 0).is_empty());
    }
}
