// A short Java workload; with an argument, this process's /proc/self/smaps
// on stderr (read by the test).
import java.util.Map;
import java.util.TreeMap;

public class Work {
    public static void main(String[] args) throws Exception {
        int n = args.length > 0 ? Integer.parseInt(args[0]) : 200000;
        long h = 0;
        TreeMap<Integer, String> m = new TreeMap<>();
        for (int i = 0; i < n; i++) {
            m.put((int) ((i * 7919L) % 100003), Integer.toString(i));
        }
        for (Map.Entry<Integer, String> e : m.entrySet()) {
            h = h * 31 + e.getKey() + e.getValue().hashCode();
        }
        System.out.println("entries " + m.size() + " hash " + h);
        if (args.length > 1) {
            System.err.print(new String(java.nio.file.Files.readAllBytes(java.nio.file.Paths.get("/proc/self/smaps"))));
        }
    }
}
