// The streams experiments' Flink job (docs/streams.md): a processing graph of PEs, one Flink task each
// (chaining off, parallelism 1), built from a plain-text graph file that harness/streams/graph.py writes:
//
//   rate 100                        the beacon's tuples/s (0 = full rate)
//   payload 64                      bytes per tuple (Flink's buffers are bytes; see docs/streams.md)
//   control /run/dir/control        where throttles and droppers read their settings
//   aggregate 4                     tuples an aggregate sums before it emits one
//   op NAME KIND NIN NOUT           KIND: beacon pass throttle dropper barrier join aggregate sink
//   conn SRC OUTPORT DST INPORT     one stream connection
//
// Every PE counts, per port, the tuples it processed (nProcessed_inI) and submitted (nSubmitted_outJ)
// as Flink counters, read over Flink's REST API by the streams collector: InfoSphere Streams' two
// port counters (thesis 4.1.3). A submit counts once per tuple per port, whatever the fan-out (Flink
// copies the tuple to every consumer of the port).
//
// Throttles and droppers poll CONTROL/NAME.ctl ("SEQ VALUE": a rate in tuples/s or "inf" for a
// throttle, "on"/"off" for a dropper) every 10 ms and acknowledge a new SEQ in CONTROL/NAME.ack
// ("SEQ VALUE MONO", MONO = System.nanoTime() seconds = CLOCK_MONOTONIC on Linux), which is how the
// harness verifies and stamps a fault. A throttle at rate 0 does not read its input at all: its task
// thread waits, its input buffers fill and Flink's credit-based backpressure reaches upstream.
// A barrier reads one tuple from each input in turn (InputSelectable): an empty input blocks the
// others, as the thesis's Barrier does (4.6.1).

package streamsjob;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.connector.datagen.source.GeneratorFunction;
import org.apache.flink.metrics.Counter;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.operators.AbstractInput;
import org.apache.flink.streaming.api.operators.AbstractStreamOperatorFactory;
import org.apache.flink.streaming.api.operators.AbstractStreamOperatorV2;
import org.apache.flink.streaming.api.operators.Input;
import org.apache.flink.streaming.api.operators.InputSelectable;
import org.apache.flink.streaming.api.operators.InputSelection;
import org.apache.flink.streaming.api.operators.MultipleInputStreamOperator;
import org.apache.flink.streaming.api.operators.StreamOperator;
import org.apache.flink.streaming.api.operators.StreamOperatorParameters;
import org.apache.flink.streaming.api.transformations.MultipleInputTransformation;
import org.apache.flink.streaming.api.transformations.SideOutputTransformation;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.util.OutputTag;

public class NestlabStreamsJob {

    static final TypeInformation<byte[]> TUPLE =
            org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO;

    /** One PE of the graph file. */
    static final class Pe implements java.io.Serializable {
        final String name, kind;
        final int nin, nout;
        Pe(String name, String kind, int nin, int nout) {
            this.name = name; this.kind = kind; this.nin = nin; this.nout = nout;
        }
    }

    /** The graph file's settings every PE needs. */
    static final class Settings implements java.io.Serializable {
        double rate = 100;
        int payload = 64;
        String control = "/tmp";
        int aggregate = 4;
    }

    static OutputTag<byte[]> port(int j) {
        return new OutputTag<>("out" + j, TUPLE);
    }

    static byte[] tuple(long value, int payload) {
        byte[] b = new byte[Math.max(8, payload)];
        ByteBuffer.wrap(b).putLong(value);
        return b;
    }

    static long value(byte[] b) {
        return ByteBuffer.wrap(b).getLong();
    }

    // ------------------------------------------------------------------ control files

    /** Polls CONTROL/NAME.ctl and acknowledges each new setting in CONTROL/NAME.ack. */
    static final class Control implements Runnable {
        final Path ctl, ack;
        volatile String value;
        volatile boolean running = true;
        String seq = "";
        final Thread thread;

        Control(String dir, String name, String initial) {
            ctl = Path.of(dir, name + ".ctl");
            ack = Path.of(dir, name + ".ack");
            value = initial;
            thread = new Thread(this, "nestlab-control-" + name);
            thread.setDaemon(true);
            thread.start();
        }

        public void run() {
            while (running) {
                try {
                    if (Files.exists(ctl)) {
                        String[] f = Files.readString(ctl, StandardCharsets.UTF_8).trim().split("\\s+");
                        if (f.length == 2 && !f[0].equals(seq)) {
                            seq = f[0];
                            value = f[1];
                            double mono = System.nanoTime() / 1e9;
                            Path tmp = ack.resolveSibling(ack.getFileName() + ".tmp");
                            Files.writeString(tmp, seq + " " + value + " " + mono + "\n", StandardCharsets.UTF_8);
                            Files.move(tmp, ack, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
                        }
                    }
                    Thread.sleep(10);
                } catch (InterruptedException e) {
                    return;
                } catch (Exception e) {
                    // a half-written file or a vanished directory: read it again at the next poll
                }
            }
        }

        void stop() {
            running = false;
            thread.interrupt();
        }
    }

    // ------------------------------------------------------------------ the beacon (source)

    /** The DynamicBeacon: a tuple holding one integer, at the graph's fixed rate. */
    static final class Beacon implements GeneratorFunction<Long, byte[]> {
        final int payload;
        transient Counter submitted;
        Beacon(int payload) { this.payload = payload; }

        @Override
        public void open(SourceReaderContext ctx) {
            submitted = ctx.metricGroup().counter("nSubmitted_out0");
        }

        @Override
        public byte[] map(Long i) {
            submitted.inc();
            return tuple(i, payload);
        }
    }

    // ------------------------------------------------------------------ every other PE

    static final class PeOperator extends AbstractStreamOperatorV2<byte[]>
            implements MultipleInputStreamOperator<byte[]>, InputSelectable {
        final Pe pe;
        final Settings settings;
        final Counter[] processed, submitted;
        final byte[][] held;           // barrier: the tuple read from each input, or null
        int aggregated = 0;
        long sum = 0;
        Control control;
        long nextSlot = 0;             // throttle: System.nanoTime() before which no tuple passes

        PeOperator(StreamOperatorParameters<byte[]> params, Pe pe, Settings settings) {
            super(params, pe.nin);
            this.pe = pe;
            this.settings = settings;
            processed = new Counter[pe.nin];
            submitted = new Counter[pe.nout];
            for (int i = 0; i < pe.nin; i++) processed[i] = getMetricGroup().counter("nProcessed_in" + i);
            for (int j = 0; j < pe.nout; j++) submitted[j] = getMetricGroup().counter("nSubmitted_out" + j);
            held = new byte[pe.nin][];
        }

        @Override
        public void open() throws Exception {
            super.open();
            if (pe.kind.equals("throttle")) control = new Control(settings.control, pe.name, "inf");
            if (pe.kind.equals("dropper")) control = new Control(settings.control, pe.name, "off");
        }

        @Override
        public void close() throws Exception {
            if (control != null) control.stop();
            super.close();
        }

        void submit(byte[] t) {
            for (int j = 0; j < pe.nout; j++) {
                if (j == 0) output.collect(new StreamRecord<>(t));
                else output.collect(port(j), new StreamRecord<>(t));
                submitted[j].inc();
            }
        }

        /** A throttle's gate, before it reads a tuple: rate 0 waits (reads nothing), rate r paces. */
        void throttle() throws InterruptedException {
            while (true) {
                String v = control.value;
                if (v.equals("inf")) return;
                double rate = Double.parseDouble(v);
                if (rate <= 0) { Thread.sleep(5); continue; }
                long now = System.nanoTime();
                long gap = (long) (1e9 / rate);
                if (nextSlot < now - gap) nextSlot = now - gap;  // no credit saved up while idle
                nextSlot += gap;
                long wait = nextSlot - now;
                if (wait > 0) Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                return;
            }
        }

        void process(int input, byte[] t) throws Exception {
            switch (pe.kind) {
                case "throttle" -> { throttle(); processed[input].inc(); submit(t); }
                case "dropper" -> { processed[input].inc(); if (!control.value.equals("on")) submit(t); }
                case "barrier" -> {
                    processed[input].inc();
                    held[input] = t;
                    for (byte[] h : held) if (h == null) return;
                    long s = 0;
                    for (int i = 0; i < held.length; i++) { s += value(held[i]); held[i] = null; }
                    submit(tuple(s, settings.payload));
                }
                case "aggregate" -> {
                    processed[input].inc();
                    sum += value(t);
                    if (++aggregated >= settings.aggregate) {
                        submit(tuple(sum, settings.payload));
                        aggregated = 0;
                        sum = 0;
                    }
                }
                case "sink" -> processed[input].inc();
                default -> { processed[input].inc(); submit(t); }  // pass, join
            }
        }

        @Override
        public InputSelection nextSelection() {
            if (!pe.kind.equals("barrier")) return InputSelection.ALL;
            for (int i = 0; i < held.length; i++) {
                if (held[i] == null) return new InputSelection.Builder().select(i + 1).build();
            }
            return InputSelection.ALL;
        }

        @Override
        @SuppressWarnings("rawtypes")
        public List<Input> getInputs() {
            List<Input> inputs = new ArrayList<>();
            for (int i = 0; i < pe.nin; i++) {
                final int index = i;
                inputs.add(new AbstractInput<byte[], byte[]>(this, i + 1) {
                    @Override
                    public void processElement(StreamRecord<byte[]> r) throws Exception {
                        process(index, r.getValue());
                    }
                });
            }
            return inputs;
        }
    }

    static final class PeFactory extends AbstractStreamOperatorFactory<byte[]> {
        final Pe pe;
        final Settings settings;
        PeFactory(Pe pe, Settings settings) { this.pe = pe; this.settings = settings; }

        @Override
        @SuppressWarnings("unchecked")
        public <T extends StreamOperator<byte[]>> T createStreamOperator(StreamOperatorParameters<byte[]> p) {
            return (T) new PeOperator(p, pe, settings);
        }

        @Override
        @SuppressWarnings("rawtypes")
        public Class<? extends StreamOperator> getStreamOperatorClass(ClassLoader loader) {
            return PeOperator.class;
        }
    }

    // ------------------------------------------------------------------ building the job

    public static void main(String[] args) throws Exception {
        Settings settings = new Settings();
        Map<String, Pe> pes = new LinkedHashMap<>();
        List<String[]> conns = new ArrayList<>();
        for (String line : Files.readAllLines(Path.of(args[0]), StandardCharsets.UTF_8)) {
            String[] f = line.trim().split("\\s+");
            switch (f[0]) {
                case "rate" -> settings.rate = Double.parseDouble(f[1]);
                case "payload" -> settings.payload = Integer.parseInt(f[1]);
                case "control" -> settings.control = f[1];
                case "aggregate" -> settings.aggregate = Integer.parseInt(f[1]);
                case "op" -> pes.put(f[1], new Pe(f[1], f[2], Integer.parseInt(f[3]), Integer.parseInt(f[4])));
                case "conn" -> conns.add(f);
                default -> { }
            }
        }
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.disableOperatorChaining();
        env.setParallelism(1);

        // Each PE's output ports as streams, built in the file's order (upstream PEs first).
        Map<String, List<DataStream<byte[]>>> outs = new HashMap<>();
        for (Pe pe : pes.values()) {
            List<DataStream<byte[]>> ports = new ArrayList<>();
            if (pe.kind.equals("beacon")) {
                RateLimiterStrategy limit = settings.rate > 0
                        ? RateLimiterStrategy.perSecond(settings.rate) : RateLimiterStrategy.noOp();
                DataGeneratorSource<byte[]> src = new DataGeneratorSource<>(
                        new Beacon(settings.payload), Long.MAX_VALUE, limit, TUPLE);
                ports.add(env.fromSource(src, WatermarkStrategy.noWatermarks(), pe.name).name(pe.name).uid(pe.name));
            } else {
                MultipleInputTransformation<byte[]> t = new MultipleInputTransformation<>(
                        pe.name, new PeFactory(pe, settings), TUPLE, 1);
                t.setUid(pe.name);
                for (int i = 0; i < pe.nin; i++) {
                    List<DataStream<byte[]>> feeds = new ArrayList<>();
                    for (String[] c : conns) {
                        if (c[3].equals(pe.name) && Integer.parseInt(c[4]) == i) {
                            feeds.add(outs.get(c[1]).get(Integer.parseInt(c[2])));
                        }
                    }
                    DataStream<byte[]> in = feeds.get(0);
                    if (feeds.size() > 1) {  // fan-in: several connections into one input port
                        @SuppressWarnings("unchecked")
                        DataStream<byte[]>[] rest = feeds.subList(1, feeds.size()).toArray(new DataStream[0]);
                        in = in.union(rest);
                    }
                    t.addInput(in.getTransformation());
                }
                env.addOperator(t);
                for (int j = 0; j < pe.nout; j++) {
                    ports.add(j == 0 ? new DataStream<>(env, t)
                            : new DataStream<>(env, new SideOutputTransformation<>(t, port(j))));
                }
            }
            outs.put(pe.name, ports);
        }
        env.execute(args.length > 1 ? args[1] : "nestlab-streams");
    }
}
