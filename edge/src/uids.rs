//! The uids tasks run as (`[tasks] uid_range`): one per job, kept for the
//! job on this node by the owner of its checkpoint dir, which is the record.

/// A range of uids, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UidRange {
    first: u32,
    last: u32,
}

/// Why a uid range cannot be used on this host.
#[derive(Debug, thiserror::Error)]
pub enum UidRangeError {
    /// The range holds a user the host knows.
    #[error(
        "[tasks] uid_range {range} holds uid {uid}, which is user {user:?} on this host; move the range clear of existing users (see /etc/passwd), or empty it to run every task as [tasks] user"
    )]
    Taken {
        /// The range as configured.
        range: String,
        /// The uid.
        uid: u32,
        /// Its user's name.
        user: String,
    },
    /// The range lies outside this user namespace's uid map.
    #[error(
        "[tasks] uid_range {range} is not mapped in this host's user namespace (/proc/self/uid_map); pick a range inside it"
    )]
    Unmapped {
        /// The range as configured.
        range: String,
    },
}

impl UidRange {
    /// Parses `FIRST-LAST`; `None` for anything else, 0 or an inverted range.
    pub fn parse(text: &str) -> Option<UidRange> {
        let (a, b) = text.trim().split_once('-')?;
        let (first, last) = (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?);
        (first > 0 && first <= last && last < u32::MAX).then_some(UidRange { first, last })
    }

    /// Whether `uid` is in the range.
    pub fn contains(&self, uid: u32) -> bool {
        (self.first..=self.last).contains(&uid)
    }

    /// Checks that no user of this host (read from /etc/passwd: cheap, and
    /// where useradd records them; the static binary does not load NSS
    /// modules) has a uid in the range, and that the range is mapped in
    /// this user namespace.
    pub fn check_host(&self) -> Result<(), UidRangeError> {
        let range = format!("{}-{}", self.first, self.last);
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        for line in passwd.lines() {
            let mut fields = line.split(':');
            let (Some(user), Some(uid)) = (fields.next(), fields.nth(1)) else {
                continue;
            };
            if let Ok(uid) = uid.parse::<u32>()
                && self.contains(uid)
            {
                let user = user.to_string();
                return Err(UidRangeError::Taken { range, uid, user });
            }
        }
        if let Ok(map) = std::fs::read_to_string("/proc/self/uid_map") {
            let mapped = map.lines().any(|l| {
                let n: Vec<u64> = l
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                n.len() == 3 && n[0] <= self.first as u64 && (self.last as u64) < n[0] + n[2]
            });
            if !mapped {
                return Err(UidRangeError::Unmapped { range });
            }
        }
        Ok(())
    }

    /// The uid for job `job_id`: its place in the range, or the next one up
    /// (wrapping) that `in_use` does not hold ([`UidRange::check_host`] has
    /// made sure no user of the host has one). `None` when every uid is
    /// taken.
    pub fn pick(&self, job_id: u64, in_use: impl Fn(u32) -> bool) -> Option<u32> {
        let size = u64::from(self.last - self.first) + 1;
        (0..size)
            .map(|k| self.first + ((job_id + k) % size) as u32)
            .find(|&uid| !in_use(uid))
    }
}

impl std::fmt::Display for UidRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ranges_and_refuses_root_and_nonsense() {
        assert_eq!(
            UidRange::parse("60600-61099"),
            Some(UidRange {
                first: 60600,
                last: 61099
            })
        );
        assert_eq!(
            UidRange::parse(" 7 - 7 "),
            Some(UidRange { first: 7, last: 7 })
        );
        for bad in ["", "0-10", "10-5", "10", "a-b", "5-4294967295"] {
            assert_eq!(UidRange::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_job_keeps_its_place_and_skips_taken_uids() {
        let r = UidRange::parse("60600-60609").unwrap();
        assert_eq!(r.pick(3, |_| false), Some(60603));
        assert_eq!(r.pick(13, |_| false), Some(60603), "wraps by job id");
        assert_eq!(r.pick(3, |u| u == 60603), Some(60604));
        assert_eq!(r.pick(9, |u| u == 60609), Some(60600), "wraps past the end");
        assert_eq!(r.pick(3, |_| true), None, "all taken");
    }

    #[test]
    fn a_range_holding_a_known_user_is_refused_naming_it() {
        let err = UidRange::parse("1-1000")
            .unwrap()
            .check_host()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("[tasks] uid_range 1-1000") && err.contains("/etc/passwd"),
            "{err}"
        );
    }
}
