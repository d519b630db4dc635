import Postgres

/// How PostgreSQL plans one of the pipeline's statements: the one policy, declared where each statement runs. Every
/// statement also runs with `enable_seqscan=off` (`forKeyedStatements`: a plan made while a new queue's statistics call
/// it empty still takes the index) and as a prepared statement that is prepared again as it ages
/// (`PostgresConnection.PreparedStatement`: a generic plan's table sizes stay recent).
enum PlanPolicy {
    /// The generic plan, made once per prepared statement (`plan_cache_mode=force_generic_plan`): small statements run
    /// many times a second (the completer's flush, the heartbeat, a release, a fan-out of a few events), where planning
    /// afresh cost more than running (0.32 ms of planning per flush; about 1 ms per small fan-out).
    case generic
    /// PostgreSQL's own choice, in practice a custom plan per execution: the claim and a batch fan-out (a few a second),
    /// whose custom plans ran 30% faster than the generic one at 100 events.
    case chosen
}

/// The client's settings for the pipeline's transactions, whose every statement finds its rows by an index
/// (`TransactionSettings.forKeyedStatements`), by plan policy: `settings(.generic)`.
struct PipelineSettings: Sendable {
    private let keyed: TransactionSettings
    private let generic: TransactionSettings

    init(_ client: PostgresClient) {
        keyed = client.settings.forKeyedStatements()
        generic = keyed.forFrequentStatements()
    }

    func callAsFunction(_ policy: PlanPolicy) -> TransactionSettings {
        switch policy {
        case .generic: generic
        case .chosen: keyed
        }
    }
}
