//! The database schema: the migrations that create and evolve the
//! coordinator's tables, applied in order when the store opens.

/// The migrations, oldest first; a database records how many it has applied,
/// so new ones are only ever appended.
pub(super) const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE nodes (
        id TEXT PRIMARY KEY,
        capabilities TEXT NOT NULL,
        last_seq INTEGER NOT NULL DEFAULT 0,
        online INTEGER NOT NULL DEFAULT 0,
        registered_ms INTEGER NOT NULL,
        last_seen_ms INTEGER NOT NULL,
        cpu_util REAL,
        mem_util REAL,
        gpu_util REAL,
        last_sample_ms INTEGER
    );
    CREATE TABLE reports (
        node_id TEXT NOT NULL REFERENCES nodes(id),
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,
        received_ms INTEGER NOT NULL,
        PRIMARY KEY (node_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE samples (
        node_id TEXT NOT NULL REFERENCES nodes(id),
        seq INTEGER NOT NULL,
        idx INTEGER NOT NULL,
        t_ms INTEGER NOT NULL,
        cpu REAL NOT NULL,
        mem REAL NOT NULL,
        gpu REAL,
        net_rx INTEGER NOT NULL,
        net_tx INTEGER NOT NULL,
        PRIMARY KEY (node_id, seq, idx)
    ) WITHOUT ROWID;
    CREATE INDEX samples_by_time ON samples (node_id, t_ms);
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        spec TEXT NOT NULL,
        state TEXT NOT NULL,
        node TEXT,
        exit_code INTEGER,
        output_tail TEXT NOT NULL DEFAULT '[]',
        reason TEXT,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        deadline_ms INTEGER NOT NULL,
        submitted_ms INTEGER NOT NULL,
        started_ms INTEGER,
        finished_ms INTEGER
    );
    CREATE INDEX jobs_by_state ON jobs (state);
    CREATE TABLE tasks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id INTEGER NOT NULL REFERENCES jobs(id),
        node_id TEXT NOT NULL REFERENCES nodes(id),
        state TEXT NOT NULL,
        dispatched INTEGER NOT NULL DEFAULT 0,
        cancel_sent INTEGER NOT NULL DEFAULT 0,
        created_ms INTEGER NOT NULL
    );
    CREATE INDEX open_tasks ON tasks (state) WHERE state != 'done';
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        t_ms INTEGER NOT NULL,
        node_id TEXT,
        job_id INTEGER,
        kind TEXT NOT NULL,
        detail TEXT NOT NULL
    );
",
    "
    CREATE TABLE forecasts (
        node_id TEXT PRIMARY KEY REFERENCES nodes(id),
        issued_ms INTEGER NOT NULL,
        forecast TEXT NOT NULL
    );
",
    "
    CREATE TABLE links (
        from_node TEXT NOT NULL REFERENCES nodes(id),
        to_node TEXT NOT NULL,
        t_ms INTEGER NOT NULL,
        rtt_ms REAL NOT NULL,
        bandwidth_bps REAL NOT NULL,
        loss REAL NOT NULL,
        PRIMARY KEY (from_node, to_node)
    ) WITHOUT ROWID;
",
    "
    ALTER TABLE jobs ADD COLUMN admission TEXT;
    ALTER TABLE jobs ADD COLUMN reservation TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE jobs ADD COLUMN plan TEXT;
    ALTER TABLE jobs ADD COLUMN done_iters REAL NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN attained_s REAL NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN location TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE jobs ADD COLUMN rate_ips REAL;
    ALTER TABLE jobs ADD COLUMN steps_from_ms INTEGER;
    ALTER TABLE jobs ADD COLUMN progress_ms INTEGER;
    ALTER TABLE tasks ADD COLUMN rank INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE tasks ADD COLUMN world INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE tasks ADD COLUMN workers INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE tasks ADD COLUMN master_addr TEXT NOT NULL DEFAULT '127.0.0.1';
    ALTER TABLE tasks ADD COLUMN yield_requested INTEGER NOT NULL DEFAULT 0;
",
    "
    CREATE TABLE join_tokens (
        id TEXT PRIMARY KEY,
        secret_sha256 TEXT NOT NULL,
        description TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        expires_ms INTEGER,
        uses_left INTEGER,
        used INTEGER NOT NULL DEFAULT 0,
        revoked_ms INTEGER
    );
    CREATE TABLE node_certs (
        fingerprint TEXT PRIMARY KEY,
        node_id TEXT NOT NULL,
        token_id TEXT NOT NULL,
        issued_ms INTEGER NOT NULL,
        not_after_ms INTEGER NOT NULL,
        revoked_ms INTEGER
    );
    CREATE INDEX node_certs_by_node ON node_certs (node_id);
",
    "
    CREATE TABLE api_tokens (
        id TEXT PRIMARY KEY,
        secret_sha256 TEXT NOT NULL,
        scope TEXT NOT NULL,
        description TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        revoked_ms INTEGER
    );
    ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
",
    "
    ALTER TABLE node_certs ADD COLUMN issuer_sha256 TEXT NOT NULL DEFAULT '';
",
    "
    ALTER TABLE links ADD COLUMN probe_sent INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE links ADD COLUMN probe_received INTEGER NOT NULL DEFAULT 0;
",
    "
    ALTER TABLE nodes ADD COLUMN drained INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN start_window TEXT;
",
    "
    ALTER TABLE jobs ADD COLUMN reported_iters REAL;
    ALTER TABLE jobs ADD COLUMN rate_base_ms INTEGER;
    ALTER TABLE jobs ADD COLUMN rate_base_iters REAL;
    ALTER TABLE jobs ADD COLUMN measured_ips REAL;
",
    // secret_env leaves the spec's JSON: sealed under secrets.key (see
    // store::secrets, which moves the values of older rows on start), with
    // the names kept apart for listings, and cleared when the job ends.
    "
    ALTER TABLE jobs ADD COLUMN secret_env BLOB;
    ALTER TABLE jobs ADD COLUMN secret_names TEXT NOT NULL DEFAULT '[]';
    UPDATE jobs SET secret_names = (SELECT json_group_array(key) FROM json_each(jobs.spec, '$.secret_env'))
    WHERE json_extract(spec, '$.secret_env') IS NOT NULL;
    CREATE TRIGGER jobs_purge_secrets AFTER UPDATE OF state ON jobs
    WHEN NEW.state IN ('succeeded', 'failed', 'cancelled', 'rejected') AND NEW.secret_env IS NOT NULL
    BEGIN
        UPDATE jobs SET secret_env = NULL WHERE id = NEW.id;
    END;
",
    // What a node has shown: the capabilities it joined with, a larger
    // claim waiting for an admin, admin-set labels, assignments it did not
    // start, and why it was cordoned (cloud::claims, cloud::trust).
    "
    ALTER TABLE nodes ADD COLUMN joined_capabilities TEXT;
    UPDATE nodes SET joined_capabilities = capabilities;
    ALTER TABLE nodes ADD COLUMN claimed_capabilities TEXT;
    ALTER TABLE nodes ADD COLUMN labels TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE nodes ADD COLUMN unstarted INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE nodes ADD COLUMN cordon_reason TEXT;
    ALTER TABLE tasks ADD COLUMN dispatched_ms INTEGER;
    ALTER TABLE tasks ADD COLUMN taken_back INTEGER NOT NULL DEFAULT 0;
",
    // What the job's latest ended task left in its checkpoint dir, as its
    // edge saw it (tidemill_proto::CheckpointState, JSON).
    "
    ALTER TABLE jobs ADD COLUMN checkpoint TEXT;
",
    // Checkpoints that move with their jobs (cloud::checkpoints): the size
    // and step of the latest one kept, which price the job's next move, and
    // each transfer, for `jobs show`.
    "
    ALTER TABLE jobs ADD COLUMN checkpoint_bytes INTEGER;
    ALTER TABLE jobs ADD COLUMN checkpoint_step INTEGER;
    CREATE TABLE checkpoint_transfers (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id INTEGER NOT NULL,
        t_ms INTEGER NOT NULL,
        from_node TEXT NOT NULL,
        to_node TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        moved_bytes INTEGER NOT NULL,
        seconds REAL NOT NULL,
        step INTEGER NOT NULL,
        resent_chunks INTEGER NOT NULL
    );
    CREATE INDEX checkpoint_transfers_by_job ON checkpoint_transfers (job_id);
    CREATE TRIGGER checkpoint_transfers_go_with_their_job AFTER DELETE ON jobs
    BEGIN
        DELETE FROM checkpoint_transfers WHERE job_id = OLD.id;
    END;
",
    // When each node was last sampled at or over its idle threshold (the
    // threshold its latest forecast states), so the scheduler knows how long
    // a box that went idle has stayed so (tidemill_sched::EdgeAvailability::
    // idle_since_ms) before it hands it work that promises nothing.
    "
    ALTER TABLE nodes ADD COLUMN busy_ms INTEGER;
    ALTER TABLE nodes ADD COLUMN idle_threshold_pct REAL;
    UPDATE nodes SET idle_threshold_pct =
        (SELECT json_extract(f.forecast, '$.idle_threshold_pct') FROM forecasts f WHERE f.node_id = nodes.id);
",
    // The site each node says it stands at (its config's `site`), and the
    // peers' prior the coordinator last sent it (JSON of
    // tidemill_forecast::Prior; NULL once its own history stands alone), so
    // the round trusts the windows the prior backs, not the node's word.
    "
    ALTER TABLE nodes ADD COLUMN site TEXT;
    ALTER TABLE nodes ADD COLUMN prior TEXT;
    CREATE INDEX nodes_by_site ON nodes (site);
",
    // When each job last started (its first start is started_ms), so `jobs
    // show` says since when it runs where it runs, after moves and pauses.
    "
    ALTER TABLE jobs ADD COLUMN last_started_ms INTEGER;
    UPDATE jobs SET last_started_ms = started_ms;
",
    // Samples past `raw_sample_hours`, downsampled to the slots of the
    // node's forecaster (store::history): the slot length its latest forecast
    // states (NULL before any: the edge's default), and per slot the sums,
    // counts and maxima that add up when a late sample joins a slot.
    "
    ALTER TABLE nodes ADD COLUMN slot_len_s INTEGER;
    CREATE TABLE sample_slots (
        node_id TEXT NOT NULL REFERENCES nodes(id),
        slot_ms INTEGER NOT NULL,
        slot_len_s INTEGER NOT NULL,
        n INTEGER NOT NULL,
        cpu_sum REAL NOT NULL,
        cpu_max REAL NOT NULL,
        mem_sum REAL NOT NULL,
        mem_max REAL NOT NULL,
        gpu_n INTEGER NOT NULL,
        gpu_sum REAL,
        gpu_max REAL,
        net_rx INTEGER NOT NULL,
        net_tx INTEGER NOT NULL,
        PRIMARY KEY (node_id, slot_ms, slot_len_s)
    ) WITHOUT ROWID;
",
    // A hello's prior reads the latest forecasts first (store::priors).
    "
    CREATE INDEX forecasts_by_issue ON forecasts (issued_ms);
",
    // The address each node's edge last connected from, written by the
    // replica holding its session, so that the leading replica can start
    // rank 0 there; and the lease of the replica that runs the scheduling
    // rounds, with its epoch, the fencing token of its writes
    // (store::lease).
    "
    ALTER TABLE nodes ADD COLUMN address TEXT;
    CREATE TABLE leader_lease (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        holder TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        expires_ms INTEGER NOT NULL
    );
",
];
