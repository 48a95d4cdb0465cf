//! LISTEN/NOTIFY notifications.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::Stream;
use postgres_protocol::message::backend::NotificationResponseBody;

use crate::{Client, Error};

/// A notification sent with `NOTIFY channel, 'payload'` to a channel this connection `LISTEN`s on.
///
/// ```no_run
/// # async fn f(mut client: slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// client.batch_execute("LISTEN jobs").await?;
/// let n = client.wait_for_notification().await?;
/// println!("{} says {} on {}", n.process_id(), n.payload(), n.channel());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    process_id: i32,
    channel: String,
    payload: String,
}

impl Notification {
    pub(crate) fn from_body(body: &NotificationResponseBody) -> Result<Notification, Error> {
        match (body.channel(), body.message()) {
            (Ok(channel), Ok(payload)) => Ok(Notification {
                process_id: body.process_id(),
                channel: channel.to_string(),
                payload: payload.to_string(),
            }),
            _ => Err(Error::protocol("malformed NotificationResponse message")),
        }
    }

    /// The process id of the backend that sent it.
    ///
    /// ```no_run
    /// # async fn f(listener: &mut slipstream_pg::Client, sender: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// listener.batch_execute("LISTEN jobs").await?;
    /// sender.batch_execute("NOTIFY jobs, 'job 7'").await?;
    /// let n = listener.wait_for_notification().await?;
    /// assert_eq!(n.process_id(), sender.backend_pid());
    /// # Ok(()) }
    /// ```
    pub fn process_id(&self) -> i32 {
        self.process_id
    }
    /// The channel name.
    ///
    /// ```no_run
    /// # async fn f(listener: &mut slipstream_pg::Client, sender: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// listener.batch_execute("LISTEN jobs").await?;
    /// sender.batch_execute("NOTIFY jobs").await?;
    /// assert_eq!(listener.wait_for_notification().await?.channel(), "jobs");
    /// # Ok(()) }
    /// ```
    pub fn channel(&self) -> &str {
        &self.channel
    }
    /// The payload (empty if none was given).
    ///
    /// ```no_run
    /// # async fn f(listener: &mut slipstream_pg::Client, sender: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// listener.batch_execute("LISTEN jobs").await?;
    /// sender.batch_execute("SELECT pg_notify('jobs', 'job 7'); NOTIFY jobs").await?;
    /// assert_eq!(listener.wait_for_notification().await?.payload(), "job 7");
    /// assert_eq!(listener.wait_for_notification().await?.payload(), ""); // none given
    /// # Ok(()) }
    /// ```
    pub fn payload(&self) -> &str {
        &self.payload
    }
}

impl Client {
    /// The notifications of the channels this connection `LISTEN`s on, as a [`Stream`]: first
    /// those already received, then each as it arrives. Settles the connection first (see
    /// [`Client::settle`]); while the stream lives, the connection serves nothing else (it
    /// holds `&mut Client`). Drop it to run statements again; notifications that arrive
    /// meanwhile are kept for the next stream or [`Client::take_notifications`].
    ///
    /// The stream ends only after an error: the connection was closed, or it is inside a
    /// transaction block, where PostgreSQL holds notifications until the transaction ends (the
    /// stream then returns those already received, then an
    /// [`ErrorKind::Usage`](crate::ErrorKind::Usage) error, instead of waiting for ever).
    ///
    /// ```no_run
    /// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
    /// use futures_util::StreamExt;
    /// client.batch_execute("LISTEN jobs").await?;
    /// let jobs: Vec<_> = client.notifications().await?.take(3).collect().await;
    /// for job in jobs {
    ///     println!("job {}", job?.payload());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn notifications(&mut self) -> Result<Notifications<'_>, Error> {
        self.conn.settle().await?;
        Ok(Notifications {
            client: self,
            terminated: false,
        })
    }
}

/// A stream of notifications; see [`Client::notifications`].
///
/// Dropping it is always safe: nothing is owed to it.
///
/// ```no_run
/// # async fn f(client: &mut slipstream_pg::Client) -> Result<(), slipstream_pg::Error> {
/// use futures_util::StreamExt;
/// use std::time::Duration;
/// client.batch_execute("LISTEN jobs").await?;
/// let mut jobs = client.notifications().await?;
/// // Wait at most a second for the next one.
/// match tokio::time::timeout(Duration::from_secs(1), jobs.next()).await {
///     Ok(Some(n)) => println!("job {}", n?.payload()),
///     Ok(None) => unreachable!("the stream ends only after an error"),
///     Err(_) => println!("no job within a second"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Notifications<'a> {
    client: &'a mut Client,
    terminated: bool,
}

impl Stream for Notifications<'_> {
    type Item = Result<Notification, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let conn = &mut this.client.conn;
        if let Some(n) = conn.notifications.pop_front() {
            return Poll::Ready(Some(Ok(n)));
        }
        if this.terminated {
            return Poll::Ready(None);
        }
        // Settled when the stream was made, and nothing is sent while it lives: the status is
        // the server's, and inside a transaction block nothing would ever arrive.
        if let Err(e) = conn.check_can_wait_for_notifications() {
            this.terminated = true;
            return Poll::Ready(Some(Err(e)));
        }
        // Settled, nothing else is owed: whatever arrives is asynchronous (absorbed into the
        // queue by `poll_exchange`) or a protocol violation.
        let result = match conn.poll_exchange(cx, || 0) {
            Poll::Pending => {
                return match conn.notifications.pop_front() {
                    Some(n) => Poll::Ready(Some(Ok(n))),
                    None => Poll::Pending,
                };
            }
            Poll::Ready(Ok(m)) => {
                let name = crate::connect::message_name(&m);
                Err(conn.poison(Error::protocol(format!(
                    "server sent an unexpected {name} message while the connection was idle"
                ))))
            }
            Poll::Ready(Err(e)) => Err(e),
        };
        this.terminated = true;
        Poll::Ready(Some(result))
    }
}
