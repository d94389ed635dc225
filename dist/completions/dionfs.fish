# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_dionfs_global_optspecs
    string join \n log-level= h/help V/version
end

function __fish_dionfs_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_dionfs_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_dionfs_using_subcommand
    set -l cmd (__fish_dionfs_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c dionfs -n "__fish_dionfs_needs_command" -l log-level -d 'Which log lines to write: off, error, warn, info, debug or trace (also warning, verbose, quiet...), then any MODULE=LEVEL (info,dionfs_transport=debug). Overrides DIONFS_LOG and the config\'s log_level. [default: info]' -r
complete -c dionfs -n "__fish_dionfs_needs_command" -s h -l help -d 'Print help'
complete -c dionfs -n "__fish_dionfs_needs_command" -s V -l version -d 'Print version'
complete -c dionfs -n "__fish_dionfs_needs_command" -f -a "serve" -d 'Serve DIR, or the exports of --config, over NFS'
complete -c dionfs -n "__fish_dionfs_needs_command" -f -a "reload" -d 'Make a running server read its --config again, keeping connections'
complete -c dionfs -n "__fish_dionfs_needs_command" -f -a "stats" -d 'Call counts and service times of the running server (like `nfsstat -s`)'
complete -c dionfs -n "__fish_dionfs_needs_command" -f -a "exportfs" -d 'What the running server exports now, with every option it applies'
complete -c dionfs -n "__fish_dionfs_needs_command" -f -a "clients" -d 'The clients of the running server: NLM hosts and NFSv4 clients'
complete -c dionfs -n "__fish_dionfs_needs_command" -f -a "scrub" -d 'Verify integrity exports\' blocks against their CRC32C, offline'
complete -c dionfs -n "__fish_dionfs_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l config -d 'A TOML file with [server] settings and [[export]] sections' -r -F
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l allow -d 'Clients allowed to mount (address, CIDR, host name or wildcard such as *.example.com; repeatable). [default: loopback only]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l listen -d 'Address to listen on' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l nfs-port -d 'NFS port (0: any free port)' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l mount-port -d 'MOUNT port (0: any free port)' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l portmap-port -d 'Portmapper port (0: any free port). If it is taken, dionfs runs without one' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l state-dir -d 'Where the file-handle key is kept (handles survive restarts with it)' -r -F
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l ports-file -d 'After binding, write the ports in use as JSON to this file' -r -F
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l metrics -d 'Serve Prometheus metrics, and what `dionfs stats`, `exportfs` and `clients` ask, over HTTP on ADDR:PORT. With --config, overrides its `metrics_listen`. [default: 127.0.0.1:9049 for `serve DIR`; the config\'s metrics_listen with --config]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l pid-file -d 'Write the server\'s process id to FILE while it runs (for `dionfs reload`; with --config, overrides its `pid_file`)' -r -F
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l nlm-port -d 'NLM\'s TCP port (0: any free port, found by clients through the port mapper). With --config, overrides `nlm_port`. [default: 0]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l nsm-port -d 'NSM\'s UDP port for reboot notifications (0: any free port). With --config, overrides `nsm_port`. [default: 0]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l grace-period -d 'After a restart with clients that held locks, grant only their reclaims for SECS seconds (0: none). With --config, overrides `grace_period`. [default: 90]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l nfs-versions -d 'The NFS versions served, comma-separated from "3", "4.0", "4.1", "4.2" (NFSv4 needs no port mapper, MOUNT or NLM: one TCP port). With --config, overrides `versions`. [default: 3,4.0,4.1,4.2]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l stall-timeout -d 'Drop a connection whose call stops arriving half-way for SECS seconds. With --config, overrides its `stall_timeout`. [default: 5]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l reply-timeout -d 'Close a connection whose client reads none of its replies for SECS seconds. With --config, overrides `reply_timeout`. [default: 30]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l idle-timeout -d 'Close a connection without calls for SECS seconds. With --config, overrides `idle_timeout`. [default: 360]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l idle-spin-us -d 'While no call is in flight, a connection sending one call at a time looks for its next one for up to N microseconds before sleeping (0 never, at most 1000). With --config, overrides `idle_spin_us`. [default: 100]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l large-read-depth-mib -d 'While a small direct READ is at an export\'s device, large direct reads start only while less than N MiB of them are there: less favours random READs beside sequential readers, more the sequential readers (0: no limit). With --config, overrides `large_read_depth_mib`. [default: 4]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l max-connections -d 'Connections open at once; a new one past it closes the connection quiet longest (5 s at least), else is closed at once. With --config, overrides `max_connections`. [default: 4096]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l tls-certificate -d 'Let clients switch their connections to TLS (RFC 9289, RPC-with-TLS) with this certificate (PEM, the chain after it); needs --tls-key. With --config, overrides the `[tls]` table\'s `certificate`' -r -F
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l tls-key -d 'The private key of --tls-certificate (PEM). With --config, overrides `[tls]` `key`' -r -F
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l tls-client-ca -d 'Ask TLS clients for a certificate, and accept one only if a CA of this file (PEM) signed it. With --config, overrides `[tls]` `client_ca`' -r -F
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l tls-handshake-timeout -d 'Close a connection whose TLS handshake is not done in SECS seconds. With --config, overrides `[tls]` `handshake_timeout`. [default: 10]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l anonuid -d 'The anonymous user (not 4294967295: no user on Linux)' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l anongid -d 'The anonymous group (not 4294967295)' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l read-mode -d 'How READs touch the file: buffered, dontcache or direct' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l write-mode -d 'How WRITEs touch the file: buffered, dontcache or direct' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l max-transfer -d 'Largest READ/WRITE (rtmax/wtmax) in bytes' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l open-files -d 'Files kept open while unused (the open-file cache; at least 1)' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l integrity -d 'Keep a CRC32C of every 4 KiB block of every file (under --state-dir), verified on every READ: `crc32c` or `off`' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l xprtsec -d 'The connections NFS calls may come over, comma-separated: none (plain TCP/UDP), tls (TLS without a client certificate), mtls (TLS with one that verified against --tls-client-ca), as exports(5)\'s xprtsec (whose `tls:mtls` is taken too). With --config, use `xprtsec` in the export instead. [default: none,tls,mtls]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l log-level -d 'Which log lines to write: off, error, warn, info, debug or trace (also warning, verbose, quiet...), then any MODULE=LEVEL (info,dionfs_transport=debug). Overrides DIONFS_LOG and the config\'s log_level. [default: info]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l no-portmap -d 'Run without a portmapper (clients then need port= and mountport=)'
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l no-metrics -d 'Serve no metrics (`dionfs stats`, `exportfs -v` and `clients` then cannot ask this server anything)'
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l no-io-uring -d 'Run every call on blocking threads, without io_uring (otherwise direct READs and aligned direct WRITEs go through io_uring where the kernel allows it). With --config, overrides its `io_uring`'
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l no-nlm -d 'Serve no NLM/NSM lock service (clients must then mount with `nolock`). With --config, overrides its `nlm`'
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l ro -d 'Export read-only'
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l all-squash -d 'Map every user to the anonymous ids'
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l no-root-squash -d 'Let root be root'
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l async -d 'Reply to CREATE, REMOVE, RENAME, SETATTR... before the change is on disk (exports(5) `async`). Faster; UNSAFE: a crash or power loss can lose changes clients were told had been made'
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l allow-devices -d 'Let MKNOD create character and block devices'
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -l insecure -d 'Serve NFS calls and MNT from any source port (exports(5) `insecure`). With --config, use `secure = false` in the export instead. [default: secure, only from ports below 1024, which only root binds]'
complete -c dionfs -n "__fish_dionfs_using_subcommand serve" -s h -l help -d 'Print help'
complete -c dionfs -n "__fish_dionfs_using_subcommand reload" -l pid -d 'The server\'s process id' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand reload" -l pid-file -d 'The file the server wrote its pid to (its --pid-file / pid_file)' -r -F
complete -c dionfs -n "__fish_dionfs_using_subcommand reload" -l log-level -d 'Which log lines to write: off, error, warn, info, debug or trace (also warning, verbose, quiet...), then any MODULE=LEVEL (info,dionfs_transport=debug). Overrides DIONFS_LOG and the config\'s log_level. [default: info]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand reload" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dionfs -n "__fish_dionfs_using_subcommand stats" -l count -d 'With an interval, stop after N reports' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand stats" -l metrics -d 'The server\'s metrics address (its --metrics / metrics_listen). [default: the metrics_listen of /etc/dionfs.toml if it sets one, else 127.0.0.1:9049, where `dionfs serve DIR` serves them]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand stats" -l config -d 'Read the server\'s address from this config\'s metrics_listen' -r -F
complete -c dionfs -n "__fish_dionfs_using_subcommand stats" -l log-level -d 'Which log lines to write: off, error, warn, info, debug or trace (also warning, verbose, quiet...), then any MODULE=LEVEL (info,dionfs_transport=debug). Overrides DIONFS_LOG and the config\'s log_level. [default: info]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand stats" -l raw -d 'Print every counter as the server exports it (Prometheus text)'
complete -c dionfs -n "__fish_dionfs_using_subcommand stats" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dionfs -n "__fish_dionfs_using_subcommand exportfs" -l metrics -d 'The server\'s metrics address (its --metrics / metrics_listen). [default: the metrics_listen of /etc/dionfs.toml if it sets one, else 127.0.0.1:9049, where `dionfs serve DIR` serves them]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand exportfs" -l config -d 'List the exports of this config file, not the running server\'s' -r -F
complete -c dionfs -n "__fish_dionfs_using_subcommand exportfs" -l convert -d 'Print a dionfs config (TOML) for this /etc/exports file instead' -r -F
complete -c dionfs -n "__fish_dionfs_using_subcommand exportfs" -l log-level -d 'Which log lines to write: off, error, warn, info, debug or trace (also warning, verbose, quiet...), then any MODULE=LEVEL (info,dionfs_transport=debug). Overrides DIONFS_LOG and the config\'s log_level. [default: info]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand exportfs" -s v -l verbose -d 'Accepted for `exportfs -v` habits; the listing is always verbose'
complete -c dionfs -n "__fish_dionfs_using_subcommand exportfs" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dionfs -n "__fish_dionfs_using_subcommand clients" -l metrics -d 'The server\'s metrics address (its --metrics / metrics_listen). [default: the metrics_listen of /etc/dionfs.toml if it sets one, else 127.0.0.1:9049, where `dionfs serve DIR` serves them]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand clients" -l config -d 'Read the server\'s address from this config\'s metrics_listen' -r -F
complete -c dionfs -n "__fish_dionfs_using_subcommand clients" -l log-level -d 'Which log lines to write: off, error, warn, info, debug or trace (also warning, verbose, quiet...), then any MODULE=LEVEL (info,dionfs_transport=debug). Overrides DIONFS_LOG and the config\'s log_level. [default: info]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand clients" -l json -d 'Print a JSON array of objects instead'
complete -c dionfs -n "__fish_dionfs_using_subcommand clients" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dionfs -n "__fish_dionfs_using_subcommand scrub" -l export -d 'An export directory to scrub (repeatable). With --config, limits the scrub to these of its integrity exports. [default: all of them]' -r -F
complete -c dionfs -n "__fish_dionfs_using_subcommand scrub" -l config -d 'The server\'s TOML config (its exports and state_dir)' -r -F
complete -c dionfs -n "__fish_dionfs_using_subcommand scrub" -l state-dir -d 'The server\'s state directory. [default: the config\'s, else /var/lib/dionfs]' -r -F
complete -c dionfs -n "__fish_dionfs_using_subcommand scrub" -l log-level -d 'Which log lines to write: off, error, warn, info, debug or trace (also warning, verbose, quiet...), then any MODULE=LEVEL (info,dionfs_transport=debug). Overrides DIONFS_LOG and the config\'s log_level. [default: info]' -r
complete -c dionfs -n "__fish_dionfs_using_subcommand scrub" -l repair-metadata -d 'Rebuild the checksums of files changed behind the server\'s back (or never checksummed) from their data, instead of only listing them'
complete -c dionfs -n "__fish_dionfs_using_subcommand scrub" -l allow-unchecked -d 'Exit 0 even if files with data have no checksums at all (files written only locally, never through an integrity export). Without it they make the exit status 3: a scrub pointed at the wrong state directory finds no checksum for anything'
complete -c dionfs -n "__fish_dionfs_using_subcommand scrub" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dionfs -n "__fish_dionfs_using_subcommand help; and not __fish_seen_subcommand_from serve reload stats exportfs clients scrub help" -f -a "serve" -d 'Serve DIR, or the exports of --config, over NFS'
complete -c dionfs -n "__fish_dionfs_using_subcommand help; and not __fish_seen_subcommand_from serve reload stats exportfs clients scrub help" -f -a "reload" -d 'Make a running server read its --config again, keeping connections'
complete -c dionfs -n "__fish_dionfs_using_subcommand help; and not __fish_seen_subcommand_from serve reload stats exportfs clients scrub help" -f -a "stats" -d 'Call counts and service times of the running server (like `nfsstat -s`)'
complete -c dionfs -n "__fish_dionfs_using_subcommand help; and not __fish_seen_subcommand_from serve reload stats exportfs clients scrub help" -f -a "exportfs" -d 'What the running server exports now, with every option it applies'
complete -c dionfs -n "__fish_dionfs_using_subcommand help; and not __fish_seen_subcommand_from serve reload stats exportfs clients scrub help" -f -a "clients" -d 'The clients of the running server: NLM hosts and NFSv4 clients'
complete -c dionfs -n "__fish_dionfs_using_subcommand help; and not __fish_seen_subcommand_from serve reload stats exportfs clients scrub help" -f -a "scrub" -d 'Verify integrity exports\' blocks against their CRC32C, offline'
complete -c dionfs -n "__fish_dionfs_using_subcommand help; and not __fish_seen_subcommand_from serve reload stats exportfs clients scrub help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
