//! Closing a connection from outside the task that uses it: what a pool does to a connection
//! borrowed too long.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::socket::Socket;
use crate::{CancelToken, Error};

/// How long [`AbortHandle::abort`] waits for the server to take the cancel request before it
/// shuts the socket anyway.
const CANCEL_WAIT: Duration = Duration::from_secs(2);

/// Ends a connection from another task: shuts the socket down and cancels the statement its
/// backend is running, so the owner's next call (or the one it is blocked in) fails with
/// [`ErrorKind::Closed`](crate::ErrorKind::Closed) and the reason given here.
///
/// The handle holds a duplicate of the socket's file descriptor (the socket stays open at the
/// OS level until both the client and the handle are dropped), so it can never shut down an
/// unrelated socket that reused the client's descriptor number.
///
/// ```no_run
/// # async fn f(mut client: slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// let handle = client.abort_handle()?;
/// tokio::spawn(async move {
///     tokio::time::sleep(std::time::Duration::from_secs(1)).await;
///     handle.abort("held for longer than 1 s").await;
/// });
/// let err = client.simple_query("SELECT pg_sleep(30)").await.unwrap_err();
/// assert!(err.to_string().contains("held for longer than 1 s"));
/// # Ok(()) }
/// ```
pub struct AbortHandle {
    cancel: CancelToken,
    socket: OwnedFd,
    reason: Arc<Mutex<Option<String>>>,
}

impl AbortHandle {
    pub(crate) fn new(
        socket: &Socket,
        cancel: CancelToken,
        reason: Arc<Mutex<Option<String>>>,
    ) -> Result<AbortHandle, Error> {
        let fd = match socket {
            Socket::Tcp(s) => s.as_fd().try_clone_to_owned(),
            Socket::Unix(s) => s.as_fd().try_clone_to_owned(),
            Socket::Tls(s) => s.get_ref().0.as_fd().try_clone_to_owned(),
        }
        // A failed dup (EMFILE) is the process's limit, not the connection's: the connection
        // stays usable, so the error must not say `is_closed`, or a caller following the
        // documented reconnect pattern would throw a good connection away.
        .map_err(|e| {
            Error::local_io(
                "could not duplicate the socket for an abort handle",
                e,
                "the connection is unharmed; raise the process's open-file limit (ulimit -n) or close files",
            )
        })?;
        Ok(AbortHandle {
            cancel,
            socket: fd,
            reason,
        })
    }

    /// Shuts the socket down and cancels the backend's running statement (waiting at most 2 s
    /// for the server to take the request). The connection's owner then gets
    /// `connection closed by its pool: <reason>` from its current or next call. Calling it
    /// again does nothing more.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let handle = client.abort_handle()?;
    /// handle.abort("shutting down").await;
    /// let e = client.batch_execute("SELECT 1").await.unwrap_err();
    /// assert!(e.is_closed() && e.to_string().contains("shutting down"));
    /// # Ok(()) }
    /// ```
    pub async fn abort(&self, reason: &str) {
        {
            let mut slot = self.reason.lock().unwrap_or_else(|p| p.into_inner());
            if slot.is_some() {
                return;
            }
            *slot = Some(reason.to_string());
        }
        // Shut down first, so the owner's pending read ends at once with the reason above
        // (cancelling first would hand it a bare "canceling statement" error). The cancel
        // request goes to the postmaster on a connection of its own, and is still needed: a
        // backend busy in a statement does not notice a closed socket until it next writes.
        self.shutdown();
        let _ = tokio::time::timeout(CANCEL_WAIT, self.cancel.cancel()).await;
    }

    /// True once [`AbortHandle::abort`] was called.
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// let handle = client.abort_handle()?;
    /// assert!(!handle.is_aborted());
    /// handle.abort("held too long").await;
    /// assert!(handle.is_aborted());
    /// # Ok(()) }
    /// ```
    pub fn is_aborted(&self) -> bool {
        self.reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    fn shutdown(&self) {
        // shutdown(2) works on any connected socket, TCP or Unix; `SockRef` borrows the
        // descriptor without taking ownership. An error means the socket is already gone.
        let _ = socket2::SockRef::from(&self.socket).shutdown(std::net::Shutdown::Both);
    }
}

impl std::fmt::Debug for AbortHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AbortHandle")
            .field("backend_pid", &self.cancel.process_id)
            .field("aborted", &self.is_aborted())
            .finish()
    }
}
