import Dispatch

/// A serial executor on a dispatch queue of its own: the one thread an actor's state lives on, off Swift's cooperative
/// pool (the engine's loop starts libcurl transfers from it). Code already on the queue (a callback dispatched to it)
/// enters the actor with `assumeIsolated`, which `checkIsolated` confirms, instead of creating a task.
public final class SerialQueueExecutor: SerialExecutor, @unchecked Sendable {
    // @unchecked: the only state is the queue, which is itself thread-safe.
    /// The queue every job of this executor runs on.
    public let queue: DispatchQueue

    public init(label: String) { queue = DispatchQueue(label: label) }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedSerialExecutor()) }
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor { UnownedSerialExecutor(ordinary: self) }

    /// Called by `assumeIsolated` when the running job is not one of this executor's: being on the queue is enough.
    public func checkIsolated() { dispatchPrecondition(condition: .onQueue(queue)) }
}
