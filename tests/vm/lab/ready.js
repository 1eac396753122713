// The kernel lab's real-program workload for node (tests/vm/lab-probe.sh):
// start up (V8, the event loop, the built-in modules), say "ready", then
// wait for end of input and exit.
process.stdout.write('ready\n');
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
