//! LISTEN/NOTIFY notifications.

use postgres_protocol::message::backend::NotificationResponseBody;

use crate::Error;

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
    pub fn process_id(&self) -> i32 {
        self.process_id
    }
    /// The channel name.
    pub fn channel(&self) -> &str {
        &self.channel
    }
    /// The payload (empty if none was given).
    pub fn payload(&self) -> &str {
        &self.payload
    }
}
