"""A judged set of short engineering notes: 60 notes, 15 queries with the note that answers each, and
10 off-topic queries, each of which shares one ordinary word with some note ("schedule", "Tuesday",
"kids", "bread"...) but is about something else. The relevance tests (tests/e2e/test_memory_judged.py)
and the figures of docs/memory.md are measured on it."""

from __future__ import annotations

NOTES: tuple[str, ...] = (
    # 0-9: deploys and releases
    "The deploy of version 2.3 failed because the database migration timed out after thirty seconds.",
    "Releases go out on Tuesday afternoons after the staging smoke tests pass.",
    "Rollback procedure: redeploy the previous container image tag and restore the feature flags.",
    "Canary deploys send five percent of traffic to the new version for twenty minutes.",
    "The release checklist lives in the ops wiki and must be signed by the on-call engineer.",
    "Blue-green switching is done by flipping the load balancer target group.",
    "Hotfix branches are cut from the last release tag, never from main.",
    "The CI pipeline caches Python wheels between builds to save four minutes per run.",
    "Docker images are scanned for CVEs by Trivy before they are pushed to the registry.",
    "A merge to main triggers the build; tagging a commit triggers the production deploy.",
    # 10-19: databases
    "PostgreSQL autovacuum was tuned: scale factor 0.05 on the events table to stop bloat.",
    "The orders table is partitioned by month; old partitions are detached after a year.",
    "Read replicas lag up to two seconds under the nightly batch load.",
    "Connection pooling goes through PgBouncer in transaction mode with a pool of forty.",
    "The slow query on invoices was fixed with a composite index on customer and created date.",
    "Database backups run every night at 02:00 and are copied to a second region.",
    "Restoring a backup to staging takes about forty minutes for the full dataset.",
    "Redis holds session tokens with a twelve hour expiry; it is not a source of truth.",
    "The schema migration tool refuses to drop a column that still has readers.",
    "Elasticsearch shards were rebalanced after one node ran out of disk space.",
    # 20-29: incidents and monitoring
    "The outage on March 3 was caused by an expired TLS certificate on the API gateway.",
    "Alerts page the on-call engineer when the error rate stays above two percent for five minutes.",
    "Grafana dashboards for latency are grouped by service and by region.",
    "Postmortems are written within three working days and reviewed at the weekly ops meeting.",
    "Disk usage alarms fire at eighty percent on every database host.",
    "The memory leak in the image resizer was traced to an unclosed file handle.",
    "Log retention is thirty days in Loki and one year in cold storage.",
    "Tracing uses OpenTelemetry with a sampling rate of ten percent in production.",
    "The payment webhook retries five times with exponential backoff before giving up.",
    "A DNS misconfiguration sent the status page to the wrong host for an hour.",
    # 30-39: security and access
    "API keys are rotated every ninety days and stored in the secrets manager.",
    "Single sign-on uses OpenID Connect with Okta as the identity provider.",
    "Production SSH access requires a hardware key and is logged by the bastion host.",
    "The TLS certificates are renewed automatically by cert-manager thirty days before expiry.",
    "Dependency updates are proposed by Renovate every Monday and merged after CI passes.",
    "Rate limiting allows one hundred requests per minute per API key on the public API.",
    "Passwords are hashed with Argon2id; the old bcrypt hashes are upgraded at next login.",
    "Penetration tests are commissioned once a year from an outside firm.",
    "Service accounts may not own personal data exports; a human must approve them.",
    "Audit logs of admin actions are kept for four hundred days.",
    # 40-49: frontend, product and team
    "The dashboard switched to a dark theme after the design review.",
    "Frontend bundles are split per route; the largest chunk is now under 200 kilobytes.",
    "Accessibility audit found missing labels on the signup form inputs.",
    "The mobile app crashes on Android 9 when the camera permission is denied.",
    "Feature flags are managed in Unleash and cleaned up one sprint after full rollout.",
    "Sprint planning happens every other Monday; the schedule is in the team calendar.",
    "New engineers pair with a buddy for their first two weeks of onboarding.",
    "The support team escalates billing bugs through the dedicated Slack channel.",
    "Customer exports of more than a million rows are generated asynchronously and emailed.",
    "The search box debounces keystrokes for 300 milliseconds before calling the API.",
    # 50-59: miscellany with ordinary words
    "The kids profile feature hides mature content for accounts under thirteen.",
    "The bakery client's ordering site needs its bread catalogue synced every hour.",
    "Our office plants are watered by the facilities contractor, not by the team.",
    "The recipe service stores ingredients as structured JSON with units normalised to grams.",
    "Build agents run on spot instances; a reclaimed agent retries its job once.",
    "Cron jobs moved to Kubernetes CronJobs with a concurrency policy of Forbid.",
    "The queue worker processes email sends in batches of fifty to respect the provider limit.",
    "Timezones are stored as IANA names; timestamps are always UTC in the database.",
    "The best practice for config is environment variables validated at startup.",
    "Load tests run weekly against staging with two thousand simulated users.",
)

# (query, index of the note that answers it): each names its subject with at least one word (stem) of the
# note, as a query typed by someone who knows the topic does, so that lexical search can find it too.
JUDGED: tuple[tuple[str, int], ...] = (
    ("why did the 2.3 deployment fail", 0),
    ("which day do we ship releases", 1),
    ("how do I rollback a broken deploy", 2),
    ("how much traffic goes to a canary", 3),
    ("vacuum tuning on the events table", 10),
    ("how far behind are the read replicas", 12),
    ("how is connection pooling set up for postgres", 13),
    ("when do database backups run", 15),
    ("what caused the March outage", 20),
    ("when does the on-call engineer get paged", 21),
    ("how often are API keys rotated", 30),
    ("which identity provider do we use for SSO", 31),
    ("how are passwords hashed", 36),
    ("why does the Android app crash", 43),
    ("what is our log retention period", 26),
)

# Everyday questions, each sharing one ordinary word with a note and nothing else.
OFF_TOPIC: tuple[str, ...] = (
    "weekly yoga class schedule",
    "Tuesday piano lessons for kids",
    "best recipe for banana bread with walnuts",
    "how to water orchids in winter",
    "cheap flights to Lisbon in March",
    "birthday party games for kids",
    "training plan for my first marathon",
    "how long to boil an egg",
    "which camera lens for portrait photos",
    "good names for a golden retriever puppy",
)
