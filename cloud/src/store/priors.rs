//! Cold-start priors: the daily tide of a young node's peers, built from the
//! forecasts the store holds, sent to the node with its welcome and kept so
//! that the round trusts the windows the prior backs.
//!
//! Peers are, in order, the nodes of the same site (the `site` each edge
//! says it stands at), else of the same class (the same accelerator models
//! and CPU cores), else the whole fleet; only peers whose own forecast stands
//! on at least [`DEFAULT_PRIOR_BLEND_H`] hours of history count, so a prior
//! never rests on another prior.

use super::db;
use super::db::{OptionalExtension, Query, params};
use tidemill_forecast::{DEFAULT_PRIOR_BLEND_H, NodeForecast, Prior, PriorSource};
use tidemill_proto::Capabilities;

use super::{Store, StoreError};

/// Peer forecasts at most in one prior: the most recent ones.
const MAX_PRIOR_PEERS: usize = 32;

/// Candidate peers read per source, so that enough have a history of their own.
const CANDIDATES: usize = 4 * MAX_PRIOR_PEERS;

/// Peers whose class is read for one prior, the latest forecasts first, so
/// that a hello costs the same in a fleet of any size (reading every node's
/// class made a 10 000-edge ramp quadratic). A class with no peer among
/// them falls back to the fleet.
const CLASS_SCAN: usize = 8 * CANDIDATES;

/// A node's class for priors: its accelerator models, sorted, and its cores.
fn class_of(caps: &Capabilities) -> (Vec<String>, u32) {
    let mut models: Vec<String> = caps.accelerators.iter().map(|a| a.model.clone()).collect();
    models.sort();
    (models, caps.cpu_cores)
}

/// Whether a forecast stands on its own history: one a prior may be built from.
fn stands_alone(f: &NodeForecast) -> bool {
    f.history()
        .is_some_and(|h| h.observed_h >= DEFAULT_PRIOR_BLEND_H)
}

impl Store {
    /// The prior for `node_id`, built now and kept for the round (see the
    /// module docs); `None`, and nothing kept, once the node's own latest
    /// forecast stands on [`DEFAULT_PRIOR_BLEND_H`] hours or when no peer
    /// has a forecast of its own. Call it after the node's hello is stored.
    /// The prior has the slots of the node's latest forecast, else
    /// `slot_len_s`.
    pub fn prior_for(
        &mut self,
        node_id: &str,
        slot_len_s: u32,
    ) -> Result<Option<Prior>, StoreError> {
        let own = self.forecast(node_id)?;
        let slot_len_s = own.as_ref().map_or(slot_len_s, |f| f.slot_len_s);
        let prior = if own.as_deref().is_some_and(stands_alone) {
            None
        } else {
            self.build_prior(node_id, slot_len_s)?
        };
        let json = prior
            .as_ref()
            .map(|p| serde_json::to_string(p).expect("a prior serialises"));
        let err = self.sql_err();
        self.conn
            .execute(
                "UPDATE nodes SET prior = ?2 WHERE id = ?1",
                params![node_id, json],
            )
            .map_err(err)?;
        Ok(prior)
    }

    /// The prior each node was last sent, while it leans on one.
    pub fn priors(&self) -> Result<std::collections::HashMap<String, Prior>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self
            .conn
            .prepare("SELECT id, prior FROM nodes WHERE prior IS NOT NULL")
            .map_err(&err)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(&err)?;
        let mut out = std::collections::HashMap::new();
        for row in rows {
            let (id, json) = row.map_err(&err)?;
            if let Ok(p) = serde_json::from_str(&json) {
                out.insert(id, p);
            }
        }
        Ok(out)
    }

    fn build_prior(&self, node_id: &str, slot_len_s: u32) -> Result<Option<Prior>, StoreError> {
        let err = self.sql_err();
        let (site, caps): (Option<String>, String) = match self
            .conn
            .query_row(
                "SELECT site, capabilities FROM nodes WHERE id = ?1",
                [node_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(&err)?
        {
            Some(row) => row,
            None => return Ok(None),
        };
        if let Some(site) = site {
            let ids = self.ids(
                "SELECT n.id FROM nodes n JOIN forecasts f ON f.node_id = n.id
                 WHERE n.site = ?1 AND n.id != ?2 ORDER BY f.issued_ms DESC LIMIT ?3",
                params![site, node_id, CANDIDATES as i64],
            )?;
            if let Some(p) = self.prior_of(PriorSource::Site, &ids, slot_len_s)? {
                return Ok(Some(p));
            }
        }
        let class = serde_json::from_str::<Capabilities>(&caps)
            .ok()
            .map(|c| class_of(&c));
        let mut stmt = self
            .conn
            .prepare(
                "SELECT n.id, n.capabilities FROM nodes n JOIN forecasts f ON f.node_id = n.id
                 WHERE n.id != ?1 ORDER BY f.issued_ms DESC LIMIT ?2",
            )
            .map_err(&err)?;
        let rows = stmt
            .query_map(params![node_id, CLASS_SCAN as i64], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(&err)?;
        let mut same_class = Vec::new();
        let mut fleet = Vec::new();
        for row in rows {
            let (id, caps) = row.map_err(&err)?;
            let peer = serde_json::from_str::<Capabilities>(&caps)
                .ok()
                .map(|c| class_of(&c));
            if class.is_some() && peer == class && same_class.len() < CANDIDATES {
                same_class.push(id.clone());
            }
            if fleet.len() < CANDIDATES {
                fleet.push(id);
            }
        }
        if let Some(p) = self.prior_of(PriorSource::Class, &same_class, slot_len_s)? {
            return Ok(Some(p));
        }
        self.prior_of(PriorSource::Fleet, &fleet, slot_len_s)
    }

    /// Node ids a query returns, in its order.
    fn ids(&self, sql: &str, args: impl db::Params) -> Result<Vec<String>, StoreError> {
        let err = self.sql_err();
        let mut stmt = self.conn.prepare(sql).map_err(&err)?;
        let rows = stmt.query_map(args, |r| r.get(0)).map_err(&err)?;
        rows.collect::<Result<_, _>>().map_err(err)
    }

    /// The prior from the first [`MAX_PRIOR_PEERS`] of `ids` whose forecasts
    /// stand alone; `None` when none does.
    fn prior_of(
        &self,
        source: PriorSource,
        ids: &[String],
        slot_len_s: u32,
    ) -> Result<Option<Prior>, StoreError> {
        let mut peers = Vec::new();
        for id in ids {
            if peers.len() == MAX_PRIOR_PEERS {
                break;
            }
            if let Some(f) = self.forecast(id)?.filter(|f| stands_alone(f)) {
                peers.push(f);
            }
        }
        let refs: Vec<&NodeForecast> = peers.iter().map(|f| f.as_ref()).collect();
        Ok(Prior::from_peers(source, &refs, slot_len_s))
    }
}

#[cfg(test)]
mod tests {
    use tidemill_proto::{Report, ReportBody};

    use super::super::Batch;
    use super::super::testkit::{hello, hello_with_gpus};
    use super::*;
    use crate::store::testkit::on_both_backends;

    /// A CPU forecast from `node` standing on `observed_h` hours, 5 % all day.
    fn forecast_report(seq: u64, observed_h: f64) -> Report {
        let mut f = crate::world::tests::forecast(&[Some(5.0); 8]);
        f.resources[0].observed_h = observed_h;
        f.history_days = 14;
        Report {
            seq,
            body: ReportBody::Forecast(Box::new(f)),
        }
    }

    on_both_backends! {
        fn a_young_node_gets_its_sites_tide_else_its_class_else_the_fleets(db) {
            let mut s = db.open();
            let with_site = |id: &str, site: &str| {
                let mut h = hello(id);
                h.site = Some(site.into());
                h
            };
            for h in [
                with_site("a1", "mec-1"),
                with_site("a2", "mec-1"),
                with_site("young", "mec-1"),
                with_site("b1", "mec-2"),
                hello_with_gpus("g1", 1),
                hello_with_gpus("g2", 1),
            ] {
                s.register(&h, 0).unwrap();
            }
            let reports = |s: &mut Store, id: &str, h: f64| {
                s.apply_reports(id, &[forecast_report(1, h)], 2_000_000)
                    .unwrap();
            };
            reports(&mut s, "a1", 72.0);
            reports(&mut s, "a2", 10.0);
            reports(&mut s, "b1", 72.0);
            reports(&mut s, "g1", 72.0);

            let p = s.prior_for("young", 900).unwrap().unwrap();
            assert_eq!(
                (p.source, p.peers),
                (PriorSource::Site, 1),
                "a2 leans on a prior itself"
            );
            assert_eq!(s.priors().unwrap()["young"], p, "kept for the round");

            let p = s.prior_for("g2", 900).unwrap().unwrap();
            assert_eq!(
                (p.source, p.peers),
                (PriorSource::Class, 1),
                "g1 has its GPU"
            );

            let mut stranger = hello("c1");
            stranger.capabilities.cpu_cores = 3;
            s.register(&stranger, 0).unwrap();
            let p = s.prior_for("c1", 900).unwrap().unwrap();
            assert_eq!((p.source, p.peers), (PriorSource::Fleet, 3));

            reports(&mut s, "young", 50.0);
            assert_eq!(
                s.prior_for("young", 900).unwrap(),
                None,
                "its own history stands alone"
            );
            assert!(!s.priors().unwrap().contains_key("young"));
            assert_eq!(
                s.prior_for("a1", 300).unwrap(),
                None,
                "no peer forecast with 5-minute slots"
            );
        }
    }

    on_both_backends! {
        fn a_class_peer_counts_only_among_the_latest_forecasts(db) {
            let mut s = db.open();
            s.register(&hello_with_gpus("g1", 1), 0).unwrap();
            s.register(&hello_with_gpus("g2", 1), 0).unwrap();
            let cpus: Vec<String> = (0..CLASS_SCAN).map(|i| format!("c{i}")).collect();
            for id in &cpus {
                s.register(&hello(id), 0).unwrap();
            }
            let issued_at = |seq: u64, ms: i64| {
                let mut r = forecast_report(seq, 72.0);
                if let ReportBody::Forecast(f) = &mut r.body {
                    f.issued_ms = ms;
                }
                r
            };
            s.apply_reports("g1", &[issued_at(1, 600_000)], 2_000_000)
                .unwrap();
            let later = [issued_at(1, 700_000)];
            let batches: Vec<Batch<'_>> = cpus
                .iter()
                .map(|id| Batch {
                    node_id: id,
                    reports: &later,
                    now_ms: 2_000_000,
                })
                .collect();
            for stored in s.apply_report_batches(&batches).unwrap() {
                stored.unwrap();
            }
            let p = s.prior_for("g2", 900).unwrap().unwrap();
            assert_eq!(
                p.source,
                PriorSource::Fleet,
                "g1 forecast before the {CLASS_SCAN} latest"
            );
            s.apply_reports("g1", &[issued_at(2, 800_000)], 2_000_000)
                .unwrap();
            let p = s.prior_for("g2", 900).unwrap().unwrap();
            assert_eq!((p.source, p.peers), (PriorSource::Class, 1));
        }
    }
}
