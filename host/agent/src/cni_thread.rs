//! The thread that serves the plugin: a current-thread tokio runtime of its
//! own, on which the CNI socket is accepted and every change of the
//! allocations is made (the restore, ADD, DEL, GC, the datapath steps), with
//! its save, its routes and its netlink connection.
//!
//! Why a thread of its own: an ADD is a pod waiting to start. On the
//! agent's main runtime its steps were handed between worker and blocking
//! threads, and on a node with two cores each hand-off could wait for a CPU
//! behind what the workers were busy with (decoding a watch event of a
//! CiliumNode holding a thousand addresses, a status patch). Here the
//! request is read, decided, saved, routed and answered by one thread that
//! the kernel runs as soon as it wakes. The save's fsyncs block this thread
//! on purpose: every change is serialised by the allocator's lock anyway,
//! and nothing else runs here. The main runtime's tasks (the watch, the
//! status publisher, the health endpoints) only take the allocator's lock
//! for in-memory work.

use std::future::Future;
use std::thread::JoinHandle;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

#[derive(Debug, thiserror::Error)]
pub enum CniThreadError {
    #[error("starting the CNI thread: {0}")]
    Start(std::io::Error),
    /// The work panicked, or the thread stopped before it finished.
    #[error("the CNI thread did not finish {0}")]
    Unfinished(&'static str),
}

/// The running thread; stopped and joined on drop.
pub struct CniThread {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl CniThread {
    pub fn start() -> Result<Self, CniThreadError> {
        let (started, handle) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        // The runtime is built and dropped on its own thread: never in the
        // caller's async context, where dropping one panics.
        let thread = std::thread::Builder::new()
            .name("cni-server".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ = started.send(Err(error));
                        return;
                    }
                };
                let _ = started.send(Ok(runtime.handle().clone()));
                // Spawned tasks run while this waits; the runtime, and with
                // it every task left, is dropped here at the end.
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })
            .map_err(CniThreadError::Start)?;
        let handle = match handle.recv() {
            Ok(Ok(handle)) => handle,
            Ok(Err(error)) => return Err(CniThreadError::Start(error)),
            Err(_) => {
                return Err(CniThreadError::Start(std::io::Error::other(
                    "the thread ended before its runtime was built",
                )))
            }
        };
        Ok(Self {
            handle,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The thread's runtime: enter it to open sockets that its tasks
    /// drive (netlink, the CNI socket), or spawn on it.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Runs `future` on the thread and waits for its output; `what` names
    /// it in the error when it did not finish.
    pub async fn run<F>(&self, what: &'static str, future: F) -> Result<F::Output, CniThreadError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle
            .spawn(future)
            .await
            .map_err(|_| CniThreadError::Unfinished(what))
    }
}

impl Drop for CniThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            // A panic there was in a task, which tokio caught and reported
            // to whoever awaited it.
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No runtime of the caller's: only the CNI thread's can run the work
    /// and drive a socket opened in its context (without `enter`, binding
    /// panics for want of a reactor).
    #[test]
    fn work_runs_on_the_thread_and_sockets_opened_there_are_driven_by_it() {
        let cni = CniThread::start().unwrap();
        let name = futures::executor::block_on(cni.run("naming", async {
            std::thread::current().name().map(str::to_string)
        }))
        .unwrap();
        assert_eq!(name.as_deref(), Some("cni-server"));

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = {
            let _entered = cni.handle().enter();
            tokio::net::UnixListener::bind(&path).unwrap()
        };
        let accepting = cni.handle().spawn(async move {
            let (_stream, _) = listener.accept().await.unwrap();
            std::thread::current().name().map(str::to_string)
        });
        let _client = std::os::unix::net::UnixStream::connect(&path).unwrap();
        let accepted = futures::executor::block_on(accepting).unwrap();
        assert_eq!(accepted.as_deref(), Some("cni-server"));
    }

    #[tokio::test]
    async fn a_panic_is_an_error_and_the_thread_goes_on() {
        let cni = CniThread::start().unwrap();
        let failed = cni.run("panicking", async { panic!("on purpose") }).await;
        assert!(
            matches!(failed, Err(CniThreadError::Unfinished("panicking"))),
            "{failed:?}"
        );
        assert_eq!(cni.run("after", async { 7 }).await.unwrap(), 7);
    }

    #[test]
    fn dropping_stops_the_thread_and_its_tasks() {
        let cni = CniThread::start().unwrap();
        let (_keep, never) = oneshot::channel::<()>();
        // The task holds the only sender: the channel disconnects once the
        // task is dropped, and never while it waits.
        let (held, dropped) = std::sync::mpsc::channel::<()>();
        cni.handle().spawn(async move {
            let _held = held;
            let _ = never.await;
        });
        drop(cni);
        assert_eq!(
            dropped.recv_timeout(std::time::Duration::from_secs(5)),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected),
            "the pending task was dropped with the thread"
        );
    }
}
