import Glibc

/// The command line's stdout and stderr. Every line goes through `Printable.lines` on its way out, so no command,
/// usage error or configuration error can print a control character it was handed (an argument, a database value).
public enum StandardStreams {
    /// `text` and a newline on stdout.
    public static func out(_ text: String) { writeAll(Printable.lines(text) + "\n", to: STDOUT_FILENO) }

    /// `text` and a newline on stderr.
    public static func error(_ text: String) { writeAll(Printable.lines(text) + "\n", to: STDERR_FILENO) }

    /// Writes all of `text` to `descriptor` as it is (a partial write continues, EINTR retries); the caller escapes.
    public static func writeAll(_ text: String, to descriptor: Int32) {
        var text = text
        text.withUTF8 { bytes in
            guard let base = bytes.baseAddress else { return }
            var offset = 0
            while offset < bytes.count {
                let written = Glibc.write(descriptor, base + offset, bytes.count - offset)
                if written > 0 { offset += written } else if written < 0 && errno == EINTR { continue } else { return }
            }
        }
    }
}
