//! Checking a parsed topology: every value in its range and every class,
//! site and format it names defined, each error naming the key and the rule.

use std::path::Path;

use super::{ClassSpec, SiteTideSpec, Topology, TopologyError, parse_format};

impl Topology {
    pub(super) fn validate(&self, path: &Path) -> Result<(), TopologyError> {
        let bad = |key: String, value: String, rule| TopologyError::Invalid {
            path: path.to_path_buf(),
            key,
            value,
            rule,
        };
        self.validate_throughputs(&bad)?;
        if self.cloud.is_empty() && self.edge.is_empty() {
            return Err(bad(
                "cloud/edge".into(),
                "none".into(),
                "give at least one [[cloud]] or [[edge]] site",
            ));
        }
        for (i, c) in self.cloud.iter().enumerate() {
            if c.nodes == 0 || c.gpus_per_node == 0 {
                return Err(bad(
                    format!("cloud[{i}].nodes/gpus_per_node"),
                    format!("{}/{}", c.nodes, c.gpus_per_node),
                    "both must be at least 1",
                ));
            }
            if c.price_per_gpu_hour.is_nan() || c.price_per_gpu_hour < 0.0 {
                return Err(bad(
                    format!("cloud[{i}].price_per_gpu_hour"),
                    c.price_per_gpu_hour.to_string(),
                    "must be a non-negative number",
                ));
            }
        }
        for (i, e) in self.edge.iter().enumerate() {
            if e.devices == 0 {
                return Err(bad(
                    format!("edge[{i}].devices"),
                    "0".into(),
                    "must be at least 1",
                ));
            }
            if !(0.0..=100.0).contains(&e.idle_threshold_pct) {
                return Err(bad(
                    format!("edge[{i}].idle_threshold_pct"),
                    e.idle_threshold_pct.to_string(),
                    "must be a percentage, 0 to 100",
                ));
            }
            if e.sites == 0 || (e.sites > 1 && e.site.is_none()) {
                return Err(bad(
                    format!("edge[{i}].sites"),
                    e.sites.to_string(),
                    "must be at least 1, and above 1 only with a `site` name to number",
                ));
            }
        }
        let e = &self.engine;
        if e.slot_s == 0 || e.truth_bin_s == 0 || !e.truth_bin_s.is_multiple_of(e.slot_s) {
            return Err(bad(
                "engine.slot_s/truth_bin_s".into(),
                format!("{}/{}", e.slot_s, e.truth_bin_s),
                "both positive, truth_bin_s a multiple of slot_s",
            ));
        }
        if !(0.0..=1.0).contains(&e.best_effort_share) {
            return Err(bad(
                "engine.best_effort_share".into(),
                e.best_effort_share.to_string(),
                "must be between 0 and 1",
            ));
        }
        if e.max_gpus_per_job == 0 {
            return Err(bad(
                "engine.max_gpus_per_job".into(),
                "0".into(),
                "must be at least 1",
            ));
        }
        if !(e.checkpoint_interval_min > 0.0 && e.checkpoint_interval_min.is_finite()) {
            return Err(bad(
                "engine.checkpoint_interval_min".into(),
                e.checkpoint_interval_min.to_string(),
                "must be a positive number of minutes",
            ));
        }
        let d = &self.deadlines;
        if !(d.lambda_min > 0.0 && d.lambda_min <= d.lambda_max) {
            return Err(bad(
                "deadlines.lambda_min/lambda_max".into(),
                format!("{}/{}", d.lambda_min, d.lambda_max),
                "need 0 < lambda_min <= lambda_max",
            ));
        }
        if let Some(g) = &self.generator {
            if self.cloud.is_empty() {
                return Err(bad(
                    "generator".into(),
                    "no [[cloud]] group".into(),
                    "deadlines are λ × each job's runtime on the first [[cloud]] group's class: add one",
                ));
            }
            if !(g.lambda_min > 0.0 && g.lambda_min <= g.lambda_max && g.lambda_max.is_finite()) {
                return Err(bad(
                    "generator.lambda_min/lambda_max".into(),
                    format!("{}/{}", g.lambda_min, g.lambda_max),
                    "need 0 < lambda_min <= lambda_max",
                ));
            }
            if !(0.0..=1.0).contains(&g.best_effort_share) || e.best_effort_share > 0.0 {
                return Err(bad(
                    "generator.best_effort_share".into(),
                    format!(
                        "{} (engine.best_effort_share = {})",
                        g.best_effort_share, e.best_effort_share
                    ),
                    "must be between 0 and 1, and engine.best_effort_share 0 (the generator sets every job's class)",
                ));
            }
        }
        self.tidemill
            .validate()
            .map_err(|e| bad(format!("tidemill.{}", e.key), e.value, e.expected))?;
        if let Some(u) = &self.utilization {
            if let Some(f) = &u.format {
                parse_format(f).map_err(|_| {
                    bad(
                        "utilization.format".into(),
                        f.clone(),
                        "not a known preset; use a --format name of forecast-eval, e.g. alibaba-2018",
                    )
                })?;
            }
            if u.reuse_offset_h.is_nan() || u.reuse_offset_h < 0.0 {
                return Err(bad(
                    "utilization.reuse_offset_h".into(),
                    u.reuse_offset_h.to_string(),
                    "must be a non-negative number",
                ));
            }
            if let Some(by_site) = &u.by_site {
                self.validate_by_site(by_site, &bad)?;
            }
        }
        Ok(())
    }

    /// A `scale` class must scale a class loaded directly: lambdas are ratios to measured tables.
    fn validate_throughputs(
        &self,
        bad: &dyn Fn(String, String, &'static str) -> TopologyError,
    ) -> Result<(), TopologyError> {
        for (class, spec) in &self.throughputs {
            if let ClassSpec::Scale { from, .. } = spec
                && !matches!(
                    self.throughputs.get(from),
                    Some(ClassSpec::ElasticFlow(_) | ClassSpec::Sia { .. })
                )
            {
                return Err(bad(
                    format!("throughputs.{class}.scale"),
                    format!("{from:?}"),
                    "must name another class under [throughputs] given as a directory or a `sia` table; add that class or fix the name",
                ));
            }
        }
        Ok(())
    }

    fn validate_by_site(
        &self,
        s: &SiteTideSpec,
        bad: &dyn Fn(String, String, &'static str) -> TopologyError,
    ) -> Result<(), TopologyError> {
        if !(s.percentile > 0.0 && s.percentile <= 100.0) {
            return Err(bad(
                "utilization.by_site.percentile".into(),
                s.percentile.to_string(),
                "must be above 0 and at most 100",
            ));
        }
        if !(s.peak_pct > 0.0 && s.peak_pct <= 100.0) {
            return Err(bad(
                "utilization.by_site.peak_pct".into(),
                s.peak_pct.to_string(),
                "must be a percentage above 0, at most 100",
            ));
        }
        if !(0.0..1.0).contains(&s.gain_spread) {
            return Err(bad(
                "utilization.by_site.gain_spread".into(),
                s.gain_spread.to_string(),
                "must be at least 0 and under 1 (box factors lie in [1 - s, 1 + s])",
            ));
        }
        if !(s.jitter_h >= 0.0 && s.jitter_h.is_finite()) {
            return Err(bad(
                "utilization.by_site.jitter_h".into(),
                s.jitter_h.to_string(),
                "must be a non-negative number of hours",
            ));
        }
        if let Some(i) = self.edge.iter().position(|e| e.site.is_none()) {
            return Err(bad(
                format!("edge[{i}].site"),
                "none".into(),
                "[utilization.by_site] maps series onto sites: name the site of every [[edge]] group",
            ));
        }
        let sites = self.edge_sites();
        if let Some(site) = s.series.keys().find(|k| !sites.contains(k)) {
            return Err(bad(
                "utilization.by_site.series".into(),
                site.clone(),
                "is not a site of any [[edge]] group (with `sites` > 1, sites are SITE-00, SITE-01, ...)",
            ));
        }
        Ok(())
    }
}
